// Groups matching a label selector and a status (ListGroups), kept live: every member's first
// phase change and its end (a label-wide WatchRollout) re-read its group, until the group has
// taken the member's end into account and, once no member is left running, decided.
import { api } from "../client";
import { h, link, replaceChildren } from "../dom";
import { filterForm, filterOf } from "../filter";
import { groupStatusName, labelLinks, reward, time } from "../format";
import { type Group, GroupStatus, ResultView, RolloutStatus } from "../gen/rollout/v1/rollout_pb";

const LIVE = new Set([RolloutStatus.QUEUED, RolloutStatus.RUNNING, RolloutStatus.UNSPECIFIED]);
/** How often, and how many times, a group is read again while it has yet to catch up. */
const SETTLE_MS = 250;
const SETTLE_TRIES = 40;

function row(group: Group): HTMLTableRowElement {
  const spec = group.spec;
  const needed = spec ? spec.minComplete || spec.n : 0;
  const stats = group.stats;
  return h(
    "tr",
    { "data-group": group.id, "data-status": groupStatusName(group.status) },
    h("td", {}, link(`#/group/${encodeURIComponent(group.id)}`, group.id)),
    h("td", { class: "status" }, groupStatusName(group.status)),
    h("td", { class: "counted" }, `${stats?.counted ?? 0}/${needed}`),
    h("td", { class: "members" }, String(group.members.length)),
    h("td", { class: "reward" }, reward(stats?.rewardMean)),
    h("td", { class: "refills" }, String(stats?.refills ?? 0)),
    h("td", {}, labelLinks(spec?.spec?.labels ?? {})),
    h("td", {}, time(group.createTime)),
  );
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });
}

export async function groupsPage(root: Element, query: URLSearchParams, signal: AbortSignal) {
  const filter = filterOf(query, GroupStatus);
  const body = h("tbody");
  const heads = ["group", "status", "counted", "members", "mean reward", "refills", "labels", "created"];
  const table = h(
    "table",
    { id: "groups" },
    h("thead", {}, h("tr", {}, ...heads.map((name) => h("th", {}, name)))),
    body,
  );
  replaceChildren(root, h("h1", {}, "Groups"), filterForm(filter, GroupStatus, "#/groups", "rollout.batch=<id>, team=rl"), table);
  const statuses: GroupStatus[] = filter.status ? [filter.status] : [];
  const shown = new Map<string, HTMLTableRowElement>();
  const show = (group: Group) => {
    const old = shown.get(group.id);
    if (statuses.length && !statuses.includes(group.status)) {
      old?.remove();
      shown.delete(group.id);
      return;
    }
    const fresh = row(group);
    if (old) old.replaceWith(fresh);
    else body.prepend(fresh);
    shown.set(group.id, fresh);
  };

  // One reader per group at a time; one asked for while it reads reads again after.
  const ended = new Map<string, Set<string>>(); // group id -> members ended, not yet in it
  const reading = new Set<string>();
  const again = new Set<string>();
  const settle = async (groupId: string): Promise<void> => {
    if (reading.has(groupId)) {
      again.add(groupId);
      return;
    }
    reading.add(groupId);
    try {
      for (let tries = 0; tries < SETTLE_TRIES && !signal.aborted; tries++) {
        const { group } = await api.getGroup({ groupId }, { signal });
        if (!group) return;
        show(group);
        const waiting = ended.get(groupId) ?? new Set<string>();
        for (const member of group.members) {
          if (!LIVE.has(member.status)) waiting.delete(member.rolloutId);
        }
        if (group.status !== GroupStatus.RUNNING) {
          ended.delete(groupId);
          return;
        }
        const deciding = group.members.length > 0 && group.members.every((m) => !LIVE.has(m.status));
        if (!waiting.size && !deciding) return;
        await sleep(SETTLE_MS, signal);
      }
    } finally {
      reading.delete(groupId);
      if (again.delete(groupId) && !signal.aborted) void settle(groupId).catch(() => undefined);
    }
  };
  const memberEnded = (groupId: string, rolloutId: string) => {
    if (!ended.has(groupId)) ended.set(groupId, new Set());
    ended.get(groupId)!.add(rolloutId);
    void settle(groupId).catch(() => undefined);
  };

  // Watch first, then list: a group started in between is in one or the other.
  const events = api.watchRollout({ labels: filter.labels }, { signal });
  const page = await api.listGroups({ labels: filter.labels, statuses, pageSize: 100 }, { signal });
  for (const group of [...page.groups].reverse()) show(group);
  const groupOf = new Map<string, string>(); // running rollout's id -> its group's ("" for none)
  for await (const { event } of events) {
    if (!event) continue;
    const { payload } = event;
    if (payload.case === "finished") {
      groupOf.delete(event.rolloutId); // its last event
      if (payload.value.groupId) memberEnded(payload.value.groupId, event.rolloutId);
    } else if (payload.case === "phase" && !groupOf.has(event.rolloutId)) {
      groupOf.set(event.rolloutId, "");
      const got = await api.getRollout({ rolloutId: event.rolloutId, view: ResultView.SLIM }, { signal });
      const groupId = got.rollout?.groupId ?? "";
      groupOf.set(event.rolloutId, groupId);
      if (groupId) void settle(groupId).catch(() => undefined);
    }
  }
}
