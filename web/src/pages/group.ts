// One group: its members, each row filled in as the member finishes (WatchGroup).
import { api } from "../client";
import { h, link, replaceChildren } from "../dom";
import { errorKindName, reward, statusName } from "../format";
import { create } from "@bufbuild/protobuf";
import {
  type Group,
  type GroupMember,
  GroupMemberSchema,
  GroupStatus,
} from "../gen/rollout/v1/rollout_pb";

function memberRow(member: GroupMember): HTMLTableRowElement {
  return h(
    "tr",
    { "data-rollout": member.rolloutId, "data-status": statusName(member.status) },
    h("td", {}, String(member.index)),
    h("td", {}, link(`#/rollout/${encodeURIComponent(member.rolloutId)}`, member.rolloutId)),
    h("td", { class: "status" }, statusName(member.status)),
    h("td", { class: "reward" }, reward(member.reward)),
    h("td", {}, member.errorKind ? errorKindName(member.errorKind) : ""),
    h("td", {}, member.counted ? "yes" : "no"),
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
  const showGroup = (group: Group) => {
    status.textContent = GroupStatus[group.status] ?? "?";
    status.dataset.status = status.textContent;
    const s = group.stats;
    stats.textContent = s
      ? `${s.counted} counted, mean reward ${reward(s.rewardMean)} (stddev ${reward(s.rewardStddev)}), ${s.refills} refills`
      : "";
    for (const member of group.members) showMember(member);
  };
  const showMember = (member: GroupMember) => {
    const fresh = memberRow(member);
    const old = rows.get(member.rolloutId);
    if (old) old.replaceWith(fresh);
    else body.append(fresh);
    rows.set(member.rolloutId, fresh);
  };
  const got = await api.getGroup({ groupId: id }, { signal });
  if (got.group) showGroup(got.group);
  for await (const { event } of api.watchGroup({ groupId: id }, { signal })) {
    if (event.case === "member") {
      const r = event.value;
      const member = rows.get(r.id);
      if (member) {
        member.dataset.status = statusName(r.status);
        member.querySelector(".status")!.textContent = statusName(r.status);
        member.querySelector(".reward")!.textContent = reward(r.result?.reward);
      } else {
        const fields = { rolloutId: r.id, index: r.memberIndex, status: r.status };
        showMember(create(GroupMemberSchema, { ...fields, reward: r.result?.reward }));
      }
    } else if (event.case === "group") showGroup(event.value);
  }
}
