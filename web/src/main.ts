// The dashboard: routes on the URL fragment (#/, #/rollout/<id>, #/group/<id>), asks for a
// bearer token when the server wants one, and restarts the page's streams on every navigation.
import { describeError, isUnauthenticated, setToken, token } from "./client";
import { h, replaceChildren } from "./dom";
import { groupPage } from "./pages/group";
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
    else await listPage(root, new URLSearchParams(query), signal);
  } catch (error) {
    if (signal.aborted) return; // left for another page
    const message = isUnauthenticated(error)
      ? "This server wants a bearer token (ROLLOUT_AUTH_TOKENS): enter yours above."
      : describeError(error);
    replaceChildren(notice, h("p", { class: "error", id: "error" }, message));
  }
}

document.getElementById("auth")!.append(tokenForm());
window.addEventListener("hashchange", () => void route());
void route();
