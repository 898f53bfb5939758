"""The pages' views, one module per page or page group: `streams` (list, timeline, event
detail, exports, upload), `analytics` (latency, routing, admin analytics), `playground`.
`dashboard.urls` imports them. A view's function name is its URL name; a page's template is
named for the page (templates/dashboard/<page>.html).
"""
