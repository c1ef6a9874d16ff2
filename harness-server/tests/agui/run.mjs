// Drives the server's AG-UI face with the official client, @ag-ui/client's HttpAgent:
// a run that ends in an interrupt (the tool approval), then a run that resumes it with the
// approval. Prints every run's events and the agent's messages as one JSON document.
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId] = process.argv.slice(2);
const agent = new HttpAgent({
  url: `${url}/v1/agui/scripted`,
  headers: { Authorization: `Bearer ${token}` },
  threadId,
  initialMessages: [{ id: "m1", role: "user", content: "Summarize my notes" }],
});
const runs = [];
const recorder = () => {
  const events = [];
  runs.push(events);
  return { onEvent: ({ event }) => { events.push(event); } };
};

await agent.runAgent({ runId: `${threadId}-run-1` }, recorder());
const finished = runs[0].at(-1);
const interrupt = finished.outcome.interrupts[0];
const action = interrupt.metadata.action;
const payload = {
  type: "tool_approval",
  revision: action.revision,
  answer: {
    type: "decide",
    decisions: action.kind.calls.map((call) => ({ callId: call.callId, decision: { type: "approve" } })),
  },
};
await agent.runAgent(
  { runId: `${threadId}-run-2`, resume: [{ interruptId: interrupt.id, status: "resolved", payload }] },
  recorder(),
);
console.log(JSON.stringify({ runs, messages: agent.messages }));
