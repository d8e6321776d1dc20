// The label selector and status filter of a list page (#/ for rollouts, #/groups for groups):
// read from the URL fragment's query, and a form that writes it back there.
import { h } from "./dom";
import { parseLabels } from "./format";

/** A generated status enum (`RolloutStatus`, `GroupStatus`): names to numbers and back. */
type StatusEnum = Record<string, string | number>;

export interface Filter {
  labels: Record<string, string>;
  labelText: string;
  /** The status asked for; 0 (UNSPECIFIED): any. */
  status: number;
}

export function filterOf(query: URLSearchParams, statuses: StatusEnum): Filter {
  const labelText = query.get("labels") ?? "";
  const status = statuses[query.get("status") ?? ""];
  return { labels: parseLabels(labelText), labelText, status: typeof status === "number" ? status : 0 };
}

/** The filter's form; submitting it navigates to `route` with the new query. */
export function filterForm(filter: Filter, statuses: StatusEnum, route: string, hint: string): HTMLFormElement {
  const selector = h("input", { name: "labels", placeholder: `labels: ${hint}` });
  selector.value = filter.labelText;
  const status = h("select", { name: "status" }, h("option", { value: "" }, "any status"));
  for (const [name, value] of Object.entries(statuses)) {
    if (typeof value !== "number" || value === 0) continue;
    const option = h("option", { value: name }, name);
    option.selected = value === filter.status;
    status.append(option);
  }
  const form = h("form", { id: "filter" }, selector, status, h("button", {}, "filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    if (selector.value.trim()) query.set("labels", selector.value.trim());
    if (status.value) query.set("status", status.value);
    location.hash = `${route}?${query}`;
  });
  return form;
}
