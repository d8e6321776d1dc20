// One rollout as it happens: its whole event log replayed, then followed live (WatchRollout).
import { api } from "../client";
import { h, link, replaceChildren } from "../dom";
import { errorKindName, labelLinks, phaseName, reward, statusName, time } from "../format";
import {
  AgentOutputKind,
  CommandStage,
  type CommandResult,
  type Rollout,
  type RolloutEvent,
  RolloutStatus,
  ResultView,
  type Turn,
} from "../gen/rollout/v1/rollout_pb";
import { sparkline } from "../sparkline";

function turnRow(turn: Turn): HTMLTableRowElement {
  const prompt = turn.usage?.promptTokens ?? turn.promptTokenIds.length;
  const completion = turn.usage?.completionTokens ?? turn.completionTokenIds.length;
  return h(
    "tr",
    { "data-turn": String(turn.index) },
    h("td", {}, String(turn.index)),
    h("td", { class: "trainable" }, turn.trainable ? "yes" : "no"),
    h("td", { class: "prompt-tokens" }, String(prompt)),
    h("td", { class: "completion-tokens" }, String(completion)),
    h("td", {}, turn.finishReason || (turn.upstreamError ? `error ${turn.upstreamStatus}` : "")),
    h("td", {}, turn.logprobs.length ? sparkline(turn.logprobs) : "no logprobs"),
    h("td", {}, h("pre", { class: "text" }, turn.completionText || turn.upstreamError)),
  );
}

function commandBlock(command: CommandResult): HTMLElement {
  const stage = CommandStage[command.stage]?.toLowerCase() ?? "command";
  const exit = command.timedOut ? "timed out" : `exit ${command.exitCode}`;
  return h(
    "div",
    { class: "command" },
    h("h3", {}, `${stage} ${command.index}: `, h("code", {}, command.displayCommand || command.command), ` (${exit})`),
    command.stdout ? h("pre", { class: "stdout" }, command.stdout) : null,
    command.stderr ? h("pre", { class: "stderr" }, command.stderr) : null,
  );
}

class RolloutView {
  readonly status = h("span", { id: "status", class: "status" });
  readonly outcome = h("dl", { id: "outcome" });
  readonly timeline = h("ol", { id: "timeline" });
  readonly commands = h("div", { id: "commands" });
  readonly output = h("pre", { id: "output" });
  readonly turns = h("tbody");

  constructor(root: Element, id: string) {
    const heads = ["#", "trainable", "prompt tokens", "completion tokens", "finish", "logprobs", "completion"];
    replaceChildren(
      root,
      h("h1", {}, "Rollout ", h("code", {}, id), " ", this.status),
      this.outcome,
      h("h2", {}, "Phases"),
      this.timeline,
      h("h2", {}, "Model turns"),
      h(
        "table",
        { id: "turns" },
        h("thead", {}, h("tr", {}, ...heads.map((name) => h("th", {}, name)))),
        this.turns,
      ),
      h("h2", {}, "Commands"),
      this.commands,
      h("h2", {}, "Agent output"),
      this.output,
    );
  }

  setStatus(status: RolloutStatus): void {
    this.status.textContent = statusName(status);
    this.status.dataset.status = statusName(status);
  }

  describe(rollout: Rollout): void {
    this.setStatus(rollout.status);
    const result = rollout.result;
    const entries: [string, Node | string][] = [
      ["agent", rollout.spec?.agent?.name ?? ""],
      ["labels", labelLinks(rollout.spec?.labels ?? {})],
      ["created", time(rollout.createTime)],
      ["finished", time(rollout.finishTime)],
      ["reward", reward(result?.reward)],
    ];
    if (rollout.groupId) {
      entries.push(["group", link(`#/group/${encodeURIComponent(rollout.groupId)}`, rollout.groupId)]);
    }
    if (result?.error?.kind) {
      entries.push(["error", `${errorKindName(result.error.kind)}: ${result.error.message}`]);
    }
    replaceChildren(
      this.outcome,
      ...entries.flatMap(([name, value]) => [
        h("dt", {}, name),
        h("dd", { class: name }, value),
      ]),
    );
  }

  add(event: RolloutEvent): void {
    const { payload } = event;
    switch (payload.case) {
      case "phase":
        this.setStatus(payload.value.status);
        this.timeline.append(
          h(
            "li",
            { "data-phase": phaseName(payload.value.phase) },
            h("time", {}, time(event.time)),
            ` ${phaseName(payload.value.phase)} `,
            payload.value.message,
          ),
        );
        break;
      case "command":
        this.commands.append(commandBlock(payload.value));
        break;
      case "turn":
        this.turns.append(turnRow(payload.value));
        break;
      case "output":
        if (payload.value.kind === AgentOutputKind.TOOL_CALL) {
          this.output.append(`[tool ${payload.value.toolName}] `);
        }
        this.output.append(payload.value.text);
        break;
      case "finished":
        this.describe(payload.value);
        break;
      case "notice":
        this.timeline.append(
          h(
            "li",
            { class: "notice" },
            h("time", {}, time(event.time)),
            ` ${payload.value.topic}: ${payload.value.message}`,
          ),
        );
        break;
    }
  }
}

export async function rolloutPage(root: Element, id: string, signal: AbortSignal) {
  const view = new RolloutView(root, id);
  // SLIM: the turns and outputs come with the replayed events, not twice.
  const got = await api.getRollout({ rolloutId: id, view: ResultView.SLIM }, { signal });
  if (got.rollout) view.describe(got.rollout);
  for await (const { event } of api.watchRollout({ rolloutId: id }, { signal })) {
    if (event) view.add(event);
  }
}
