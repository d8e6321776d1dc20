// One group: its statistics and members, kept live. The group's own record (GetGroup) is read
// again at each member's end as WatchGroup tells it (the server has counted the member by
// then), and the members' own events (WatchRollout on the label rollout.group=<id>) show each
// member's status while it runs: the group's record keeps a member's status from its start
// until it ends.
import { api } from "../client";
import { h, link, replaceChildren } from "../dom";
import { errorKindName, reward, statusName } from "../format";
import { type Group, type GroupMember, GroupStatus, ResultView, RolloutStatus } from "../gen/rollout/v1/rollout_pb";

const GROUP_LABEL = "rollout.group";
const LIVE = new Set([RolloutStatus.QUEUED, RolloutStatus.RUNNING, RolloutStatus.UNSPECIFIED]);

function memberRow(member: GroupMember, status: RolloutStatus): HTMLTableRowElement {
  return h(
    "tr",
    { "data-rollout": member.rolloutId, "data-status": statusName(status) },
    h("td", {}, String(member.index)),
    h("td", {}, link(`#/rollout/${encodeURIComponent(member.rolloutId)}`, member.rolloutId)),
    h("td", { class: "status" }, statusName(status)),
    h("td", { class: "reward" }, reward(member.reward)),
    h("td", {}, member.errorKind ? errorKindName(member.errorKind) : ""),
    h("td", { class: "counted" }, member.counted ? "yes" : "no"),
  );
}

export async function groupPage(root: Element, id: string, signal: AbortSignal) {
  const status = h("span", { id: "status", class: "status" });
  const stats = h("p", { id: "stats" });
  const body = h("tbody");
  const heads = ["#", "rollout", "status", "reward", "error", "counted"];
  replaceChildren(
    root,
    h("h1", {}, "Group ", h("code", {}, id), " ", status),
    stats,
    h("table", { id: "members" }, h("thead", {}, h("tr", {}, ...heads.map((n) => h("th", {}, n)))), body),
  );
  const rows = new Map<string, HTMLTableRowElement>();
  const members = new Map<string, GroupMember>(); // as the group's record last had them
  const running = new Map<string, RolloutStatus>(); // a live member's status from its own events
  const showMember = (member: GroupMember) => {
    const live = LIVE.has(member.status) ? running.get(member.rolloutId) : undefined;
    const fresh = memberRow(member, live ?? member.status);
    const old = rows.get(member.rolloutId);
    if (old) old.replaceWith(fresh);
    else body.append(fresh);
    rows.set(member.rolloutId, fresh);
    members.set(member.rolloutId, member);
  };
  const showGroup = (group: Group) => {
    status.textContent = GroupStatus[group.status] ?? "?";
    status.dataset.status = status.textContent;
    const s = group.stats;
    stats.textContent = s
      ? `${s.counted} counted, mean reward ${reward(s.rewardMean)} (stddev ${reward(s.rewardStddev)}), ${s.refills} refills`
      : "";
    for (const member of group.members) showMember(member);
  };
  const read = async () => {
    const { group } = await api.getGroup({ groupId: id }, { signal });
    if (group) showGroup(group);
  };

  // The members' watch first, then the group and its running members: a member that starts
  // in between is in one or the other. The watch ends with the group's.
  const own = new AbortController();
  const stop = () => own.abort();
  signal.addEventListener("abort", stop, { once: true });
  try {
    const labels = { [GROUP_LABEL]: id };
    const events = api.watchRollout({ labels }, { signal: own.signal });
    await read();
    const page = await api.listRollouts(
      { labels, statuses: [RolloutStatus.RUNNING], pageSize: 500, view: ResultView.SLIM },
      { signal },
    );
    for (const rollout of page.rollouts) running.set(rollout.id, rollout.status);
    for (const member of members.values()) showMember(member);
    const follow = (async () => {
      for await (const { event } of events) {
        if (event?.payload.case !== "phase") continue;
        running.set(event.rolloutId, event.payload.value.status);
        const member = members.get(event.rolloutId);
        if (member) showMember(member);
        else await read(); // a refill, started after the group was read
      }
    })().catch(() => undefined); // ends when the group does (or the page is left)

    for await (const { event } of api.watchGroup({ groupId: id }, { signal })) {
      if (event.case === "member") {
        running.delete(event.value.id);
        const member = members.get(event.value.id);
        if (!member || LIVE.has(member.status)) await read(); // replays of known ends aside
      } else if (event.case === "group") showGroup(event.value);
    }
    own.abort();
    await follow;
  } finally {
    own.abort();
    signal.removeEventListener("abort", stop);
  }
}
