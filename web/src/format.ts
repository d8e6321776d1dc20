// How values read on the page: enum names without their prefix, times, rewards, labels.
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { h, link } from "./dom";
import { ErrorKind, GroupStatus, Phase, RolloutStatus } from "./gen/rollout/v1/rollout_pb";

export const statusName = (status: RolloutStatus): string => RolloutStatus[status] ?? "?";
export const phaseName = (phase: Phase): string => Phase[phase] ?? "?";
export const groupStatusName = (status: GroupStatus): string => GroupStatus[status] ?? "?";
export const errorKindName = (kind: ErrorKind): string => ErrorKind[kind] ?? "?";

export function time(timestamp: Timestamp | undefined): string {
  return timestamp ? timestampDate(timestamp).toISOString().replace("T", " ").slice(0, 23) : "";
}

export function reward(value: number | undefined): string {
  return value === undefined ? "" : value.toFixed(3);
}

/** Each label as a link to the list of rollouts carrying it (a batch: `rollout.batch=<id>`). */
export function labelLinks(map: Record<string, string>): HTMLElement {
  const links = Object.entries(map).map(([key, value]) => {
    const query = new URLSearchParams({ labels: `${key}=${value}` });
    return link(`#/?${query}`, `${key}=${value}`);
  });
  return h("span", { class: "labels" }, ...links.flatMap((a, i) => (i ? [", ", a] : [a])));
}

/** "a=1, b=2" (or "a=1,b=2") as a label map; blank parts are ignored. */
export function parseLabels(text: string): Record<string, string> {
  const map: Record<string, string> = {};
  for (const part of text.split(",")) {
    const [key, ...rest] = part.split("=");
    if (key.trim()) map[key.trim()] = rest.join("=").trim();
  }
  return map;
}
