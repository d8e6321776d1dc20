// The dashboard: routes on the URL fragment (#/, #/rollout/<id>, #/groups, #/group/<id>), asks
// for a bearer token when the server wants one, and restarts the page's streams on every
// navigation.
import { Code, ConnectError } from "@connectrpc/connect";
import { describeError, fieldViolations, isUnauthenticated, setToken, token } from "./client";
import { h, replaceChildren } from "./dom";
import { groupPage } from "./pages/group";
import { groupsPage } from "./pages/groups";
import { listPage } from "./pages/list";
import { rolloutPage } from "./pages/rollout";

const root = document.getElementById("page")!;
const notice = document.getElementById("notice")!;
let current = new AbortController();

function tokenForm(): HTMLFormElement {
  const input = h("input", { id: "token", type: "password", placeholder: "bearer token", autocomplete: "off" });
  input.value = token();
  const form = h("form", { id: "token-form" }, input, h("button", {}, "use token"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    route();
  });
  return form;
}

async function route(): Promise<void> {
  current.abort();
  current = new AbortController();
  const signal = current.signal;
  replaceChildren(notice);
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  const [, page, id] = path.split("/").map(decodeURIComponent);
  try {
    if (page === "rollout" && id) await rolloutPage(root, id, signal);
    else if (page === "group" && id) await groupPage(root, id, signal);
    else if (page === "groups") await groupsPage(root, new URLSearchParams(query), signal);
    else await listPage(root, new URLSearchParams(query), signal);
  } catch (error) {
    if (signal.aborted) return; // left for another page
    replaceChildren(notice, ...errorView(error));
  }
}

/** What went wrong, and for a refused request each field it named (`#violations`). */
function errorView(error: unknown): HTMLElement[] {
  if (isUnauthenticated(error)) {
    const text = "This server wants a bearer token (ROLLOUT_AUTH_TOKENS): enter yours above.";
    return [h("p", { class: "error", id: "error" }, text)];
  }
  const violations = fieldViolations(error);
  if (!violations.length) return [h("p", { class: "error", id: "error" }, describeError(error))];
  const code = Code[ConnectError.from(error).code];
  const items = violations.map((v) =>
    h("li", { "data-field": v.field }, h("code", {}, v.field), `: ${v.description}`),
  );
  return [
    h("p", { class: "error", id: "error" }, `${code}: the request was refused`),
    h("ul", { class: "error", id: "violations" }, ...items),
  ];
}

document.getElementById("auth")!.append(tokenForm());
window.addEventListener("hashchange", () => void route());
void route();
