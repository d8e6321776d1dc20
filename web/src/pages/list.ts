// Rollouts matching a label selector and a status, kept live by a label-wide WatchRollout. A
// `rollout batch` run labels its rollouts rollout.batch=<batch id>: its own column links to them.
import { api } from "../client";
import { h, link, replaceChildren } from "../dom";
import { filterForm, filterOf } from "../filter";
import { labelLinks, phaseName, reward, statusName, time } from "../format";
import { type Phase, ResultView, type Rollout, RolloutStatus } from "../gen/rollout/v1/rollout_pb";

const BATCH_LABEL = "rollout.batch";

function row(rollout: Rollout): HTMLTableRowElement {
  const group = rollout.groupId
    ? link(`#/group/${encodeURIComponent(rollout.groupId)}`, `${rollout.groupId}`)
    : "";
  const batchId = rollout.spec?.labels?.[BATCH_LABEL];
  const batch = batchId ? link(`#/?${new URLSearchParams({ labels: `${BATCH_LABEL}=${batchId}` })}`, batchId) : "";
  return h(
    "tr",
    { "data-rollout": rollout.id, "data-status": statusName(rollout.status) },
    h("td", {}, link(`#/rollout/${encodeURIComponent(rollout.id)}`, rollout.id)),
    h("td", { class: "status" }, statusName(rollout.status)),
    h("td", { class: "phase" }, phaseName(rollout.phase)),
    h("td", {}, rollout.spec?.agent?.name ?? ""),
    h("td", {}, labelLinks(rollout.spec?.labels ?? {})),
    h("td", {}, group),
    h("td", { class: "batch" }, batch),
    h("td", { class: "reward" }, reward(rollout.result?.reward)),
    h("td", {}, time(rollout.createTime)),
  );
}

/** A phase change of a row shown: its status and phase cells, without asking the server. */
function patch(tr: HTMLTableRowElement, status: RolloutStatus, phase: Phase): void {
  tr.dataset.status = statusName(status);
  tr.querySelector(".status")!.textContent = statusName(status);
  tr.querySelector(".phase")!.textContent = phaseName(phase);
}

export async function listPage(root: Element, query: URLSearchParams, signal: AbortSignal) {
  const filter = filterOf(query, RolloutStatus);
  const body = h("tbody");
  const heads = ["rollout", "status", "phase", "agent", "labels", "group", "batch", "reward", "created"];
  const table = h(
    "table",
    { id: "rollouts" },
    h("thead", {}, h("tr", {}, ...heads.map((name) => h("th", {}, name)))),
    body,
  );
  const batchId = filter.labels[BATCH_LABEL];
  const batchGroups = `#/groups?${new URLSearchParams({ labels: `${BATCH_LABEL}=${batchId}` })}`;
  const title = batchId
    ? h("h1", {}, "Rollouts of batch ", h("code", {}, batchId), " ", link(batchGroups, "(its groups)"))
    : h("h1", {}, "Rollouts");
  replaceChildren(root, title, filterForm(filter, RolloutStatus, "#/", "batch=nightly, team=rl"), table);
  const statuses: RolloutStatus[] = filter.status ? [filter.status] : [];
  const shown = new Map<string, HTMLTableRowElement>();
  const show = (rollout: Rollout) => {
    if (statuses.length && !statuses.includes(rollout.status)) {
      shown.get(rollout.id)?.remove();
      shown.delete(rollout.id);
      return;
    }
    const fresh = row(rollout);
    const old = shown.get(rollout.id);
    if (old) old.replaceWith(fresh);
    else body.prepend(fresh);
    shown.set(rollout.id, fresh);
  };
  // Watch first, then list: a rollout started in between is in one or the other.
  const events = api.watchRollout({ labels: filter.labels }, { signal });
  const page = await api.listRollouts(
    { labels: filter.labels, statuses, pageSize: 100, view: ResultView.SLIM },
    { signal },
  );
  for (const rollout of [...page.rollouts].reverse()) show(rollout);
  for await (const { event } of events) {
    if (!event) continue;
    const { payload } = event;
    if (payload.case === "finished") show(payload.value);
    else if (payload.case === "phase" && shown.has(event.rolloutId)) {
      const { status, phase } = payload.value;
      if (statuses.length && !statuses.includes(status)) {
        shown.get(event.rolloutId)!.remove();
        shown.delete(event.rolloutId);
      } else patch(shown.get(event.rolloutId)!, status, phase);
    } else if (payload.case === "phase") {
      const got = await api.getRollout({ rolloutId: event.rolloutId, view: ResultView.SLIM });
      if (got.rollout) show(got.rollout);
    }
  }
}
