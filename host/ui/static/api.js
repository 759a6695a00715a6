// The host API as the page uses it: the token (kept in this tab's session
// storage only), fetch with it, and the host's clock.

const KEY = 'chime.hostToken';

export function token() {
  try { return sessionStorage.getItem(KEY) || ''; } catch { return ''; }
}

export function setToken(t) {
  try {
    if (t) sessionStorage.setItem(KEY, t); else sessionStorage.removeItem(KEY);
  } catch { /* storage disabled: the token lives until reload */ }
}

let skew = 0; // host clock minus ours, ms (from the Date header: 1 s steps)

// hostNow is the host's time as well as the page can tell.
export function hostNow() { return Date.now() + skew; }

function noteDate(res) {
  const d = Date.parse(res.headers.get('Date') || '');
  if (!Number.isNaN(d)) {
    const diff = d - Date.now();
    // The header has whole seconds: only a real difference counts.
    skew = Math.abs(diff) > 2000 ? diff : 0;
  }
}

export function authHeaders() {
  const t = token();
  return t ? { Authorization: 'Bearer ' + t } : {};
}

// api fetches path and answers {status, ok, data, error}; status 0 means
// the host did not answer. text asks for task text (?include=text), which
// the host gives only with the token.
export async function api(path, { method = 'GET', body, text = false } = {}) {
  const headers = authHeaders();
  let url = path;
  if (text && token()) url += (url.includes('?') ? '&' : '?') + 'include=text';
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(url, {
      method, headers, cache: 'no-store', credentials: 'omit',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    return { status: 0, ok: false, data: null, error: 'the host did not answer (' + e.message + ')' };
  }
  noteDate(res);
  let data = null;
  try { data = await res.json(); } catch { /* an empty or non-JSON body */ }
  const error = res.ok ? null : (data && data.error) || res.statusText || ('HTTP ' + res.status);
  return { status: res.status, ok: res.ok, data, error };
}

// explain turns a refused read into what the person should do.
export function explain(r) {
  if (r.status === 401) {
    return token()
      ? 'The host refused the token you entered (401): check it against CHIME_HOST_TOKEN or the host-token file in the data directory.'
      : 'The host answers only with its token here (401): this page was not opened from the host\'s own machine (loopback), so enter the host token above (CHIME_HOST_TOKEN, or the host-token file in the data directory).';
  }
  if (r.status === 403) return 'The host refused (403): ' + r.error;
  if (r.status === 0) return r.error;
  return 'The host answered ' + r.status + ': ' + r.error;
}

// explainControl says why a control was refused.
export function explainControl(r) {
  if (r.status === 401) {
    return token()
      ? 'Refused: the host did not accept the token (401).'
      : 'Refused: controls need the host token (401). Enter it in the token field at the top; it is kept in this tab only.';
  }
  return 'Refused (' + r.status + '): ' + r.error;
}
