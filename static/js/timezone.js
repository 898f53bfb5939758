/**
 * timezone.js — the user's time zone, for the server (dashboard/timezone.py). An ES module.
 *
 * The cookie `streamscope_tz` holds `auto:<zone>` (the browser's, written here while the
 * cookie is absent or automatic: the next page is rendered in it) or a bare `<zone>`, the one
 * chosen in the top bar's selector (#time-zone-select), which this script then leaves alone.
 * A choice is the selector's form, posted at once (the server's set_time_zone writes the cookie
 * and sends the page back, its times in the new zone; without scripts a button posts it);
 * "your browser's zone" (`auto`) goes back to the browser's, which this script sends along.
 */
const COOKIE = "streamscope_tz";
const AUTO = "auto:";
const YEAR_S = 365 * 24 * 3600;

function readCookie() {
  for (const part of document.cookie.split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === COOKIE) return decodeURIComponent(rest.join("="));
  }
  return null;
}

function writeCookie(value) {
  // zone names are letters, digits, "_", "-", "+" and "/": safe in a cookie as they are
  document.cookie = `${COOKIE}=${value}; path=/; max-age=${YEAR_S}; samesite=lax`;
}

function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  } catch {
    return "UTC";
  }
}

// Other names of UTC itself (dashboard/timezone.py UTC_ALIASES): the selector lists it once.
const UTC_ALIAS = /^(Etc\/)?(UTC|UCT|Universal|Zulu)$/;

/** Every zone the browser knows, for the selector (older browsers: none besides UTC). */
function zones() {
  try {
    return Intl.supportedValuesOf("timeZone").filter((zone) => !UTC_ALIAS.test(zone));
  } catch {
    return [];
  }
}

const current = readCookie();
const browser = browserZone();
if (current === null || (current.startsWith(AUTO) && current !== AUTO + browser)) {
  writeCookie(AUTO + browser);
}

const select = document.getElementById("time-zone-select");
if (select) {
  const present = new Set([...select.options].map((o) => o.value));
  const frag = document.createDocumentFragment();
  for (const zone of zones()) {
    if (present.has(zone)) continue;
    const option = document.createElement("option");
    option.value = zone;
    option.textContent = zone;
    frag.append(option);
  }
  select.append(frag);
  const form = select.form;
  form.elements.browser.value = browser;
  select.addEventListener("change", () => form.submit());
}
