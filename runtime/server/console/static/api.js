// The console speaks to the same HTTP API as any client, with the same credential: a
// token typed once and kept in sessionStorage (this tab only, gone when it closes).
// On loopback without auth, the server makes every visitor the operator.

const TOKEN = "amodal.token";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Request headers with the visitor's credential, if they gave one. */
export function withCredential(headers = {}) {
  const token = sessionStorage.getItem(TOKEN);
  return token ? { ...headers, Authorization: `Bearer ${token}` } : headers;
}

/** The JSON answer of an API route; an ApiError with the API's code and message otherwise. */
export async function api(path, { method = "GET", body } = {}) {
  const response = await fetch(path, {
    method,
    headers: withCredential(body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : response.json();
}

/** The API's `{"error": {"code", "message"}}` of a refused request, as an ApiError. */
export async function failure(response) {
  const body = await response.json().catch(() => null);
  const error = body?.error ?? { code: "http_error", message: response.statusText };
  return new ApiError(response.status, error.code, error.message);
}

/** Who the visitor is, once they hold a credential the server accepts. */
export const caller = signIn();

async function signIn() {
  for (;;) {
    const who = await api("/console/caller");
    if (who.signed_in) {
      showCaller(who);
      return who;
    }
    sessionStorage.removeItem(TOKEN);
    await askForToken(who.error);
  }
}

function askForToken(problem) {
  const form = document.getElementById("sign-in");
  const input = document.getElementById("token");
  const why = document.getElementById("sign-in-error");
  why.textContent = problem ? `Not signed in: ${problem}.` : "";
  form.hidden = false;
  input.focus();
  return new Promise((resolve) => {
    form.addEventListener(
      "submit",
      (event) => {
        event.preventDefault();
        sessionStorage.setItem(TOKEN, input.value.trim());
        input.value = "";
        form.hidden = true;
        resolve();
      },
      { once: true },
    );
  });
}

function showCaller(who) {
  const where = document.getElementById("caller");
  const name = who.operator ? "operator" : `${who.sub || "anonymous"} (scope ${who.scope})`;
  where.replaceChildren(document.createTextNode(`Signed in as ${name}`));
  if (sessionStorage.getItem(TOKEN)) {
    const out = document.createElement("button");
    out.type = "button";
    out.className = "link";
    out.textContent = "Sign out";
    out.addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN);
      location.reload();
    });
    where.append(" ", out);
  }
  for (const element of document.querySelectorAll("[data-operator-only]")) {
    element.hidden = !who.operator;
  }
}
