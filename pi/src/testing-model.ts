/**
 * The testing kit's scripted model: pi-ai's `faux` provider answering with the replies a
 * test queued, recording every request; and the replies' helpers.
 */
import * as path from "node:path";
import { ModelRuntime } from "@earendil-works/pi-coding-agent";
import {
  fauxAssistantMessage,
  fauxProvider,
  fauxToolCall,
  getCurrentSystemPrompt,
  getCurrentTools,
  type AssistantMessage,
  type Message,
} from "@earendil-works/pi-ai";
import type { ModelRequest, StartOptions, ToolArgs } from "./testing-types.ts";

/** A model reply that calls `name` with `args` (Pi runs the tool, then asks the model again). */
export function toolCall(name: string, args: ToolArgs): AssistantMessage {
  return fauxAssistantMessage(fauxToolCall(name, args), { stopReason: "toolUse" });
}

/** A model reply that calls several tools at once. */
export function toolCalls(calls: Array<[name: string, args: ToolArgs]>): AssistantMessage {
  return fauxAssistantMessage(
    calls.map(([n, a]) => fauxToolCall(n, a)),
    { stopReason: "toolUse" },
  );
}

/** A message's text as the model reads it: text parts, tool calls as `name(args)`, tool results' text. */
export function messageText(m: Message): string {
  if (typeof m.content === "string") return m.content;
  return m.content
    .map((c) => {
      if (c.type === "text") return c.text;
      if (c.type === "toolCall") return `${c.name}(${JSON.stringify(c.arguments)})`;
      if (c.type === "thinking") return "";
      return `[${c.type}]`;
    })
    .join("\n");
}

/** A copy of what the model was sent (messages are JSON: Pi writes them to the session file). */
function requestOf(messages: Message[]): ModelRequest {
  return {
    systemPrompt: getCurrentSystemPrompt(messages),
    tools: getCurrentTools(messages).map((t) => t.name),
    messages: JSON.parse(JSON.stringify(messages.filter((m) => m.role !== "system"))) as Message[],
  };
}

/**
 * The model a started Pi talks to: pi-ai's `faux` provider, in a model runtime of its own
 * (no network), answering with `queue`'s replies, then `o.defaultReply` (default `"ok"`),
 * and recording each request in `requests`. `refill` keeps it answering.
 */
export async function scriptedModel(agentDir: string, o: StartOptions) {
  const faux = fauxProvider();
  const queue: AssistantMessage[] = [];
  const requests: ModelRequest[] = [];
  const next = (context: { messages: Message[] }) => {
    requests.push(requestOf(context.messages));
    return queue.shift() ?? fauxAssistantMessage(o.defaultReply ?? "ok");
  };
  const refill = () => {
    if (faux.getPendingResponseCount() < 16) faux.appendResponses(Array.from({ length: 64 }, () => next));
  };
  refill();
  const modelRuntime = await ModelRuntime.create({
    authPath: path.join(agentDir, "auth.json"),
    modelsPath: null,
    allowModelNetwork: false,
    refreshOnCreate: false,
  });
  modelRuntime.registerNativeProvider(faux.provider);
  return { faux, queue, requests, refill, modelRuntime };
}
