"""The pages' forms, one module per page group, as `dashboard.views`: `streams`, `analytics`,
`playground`.
"""
