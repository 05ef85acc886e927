// A minimal chat page on LangGraph's useStream hook against `onward serve`.
// ?api=URL (default http://127.0.0.1:8420) and ?assistant=NAME (default "onward").
import { useState } from "react";
import { useStream } from "@langchain/langgraph-sdk/react";

const params = new URLSearchParams(window.location.search);
const apiUrl = params.get("api") ?? "http://127.0.0.1:8420";
const assistantId = params.get("assistant") ?? "onward";

function text(content) {
  if (typeof content === "string") return content;
  return (content ?? []).map((part) => part.text ?? "").join("");
}

function Message({ m }) {
  return (
    <li className={`message ${m.type}`} data-type={m.type}>
      <b>{m.type}{m.type === "tool" ? ` (${m.name}, ${m.status ?? "success"})` : ""}</b>
      {text(m.content) && <pre className="content">{text(m.content)}</pre>}
      {(m.tool_calls ?? []).map((c) => (
        <div className="tool-call" key={c.id}>
          tool call <code>{c.name}</code> <code>{JSON.stringify(c.args)}</code>
        </div>
      ))}
    </li>
  );
}

export default function App() {
  const [threadId, setThreadId] = useState(null);
  const [runId, setRunId] = useState(null);
  const [draft, setDraft] = useState("");
  const [plan, setPlan] = useState("");
  const stream = useStream({
    apiUrl,
    assistantId,
    threadId,
    onThreadId: setThreadId,
    onCreated: (run) => setRunId(run.run_id),
    messagesKey: "messages",
  });
  const requests = stream.interrupt?.value?.action_requests ?? [];

  const send = () => {
    const message = { type: "human", content: draft };
    // A declared plan (JSON) starts a new thread's goal; a message alone is planned by the server.
    const input = plan.trim() ? { goal: draft, plan: JSON.parse(plan) } : { messages: [message] };
    stream.submit(input, { streamMode: ["values", "messages-tuple"] });
    setDraft("");
  };
  // One unkeyed decision per question of the wave, in order (as agent-chat-ui answers).
  const approveAll = () =>
    stream.submit(undefined, {
      command: { resume: { decisions: requests.map(() => ({ type: "approve" })) } },
    });
  // Cancel the run on the server (it stops before its next step), then drop the stream.
  const cancel = async () => {
    if (threadId && runId) await stream.client.runs.cancel(threadId, runId, true);
    await stream.stop();
  };

  return (
    <main id="app" data-loading={String(stream.isLoading)} data-thread={threadId ?? ""}>
      <h1>onward via useStream</h1>
      <p>
        assistant <code>{assistantId}</code>, thread <code id="thread">{threadId ?? "new"}</code>,{" "}
        <span id="status">{stream.isLoading ? "running" : "idle"}</span>
      </p>
      {stream.error && <p id="error">{String(stream.error?.message ?? stream.error)}</p>}
      <ul id="messages">
        {stream.messages.map((m, i) => <Message key={m.id ?? i} m={m} />)}
      </ul>
      {requests.length > 0 && !stream.isLoading && (
        <section id="interrupt">
          <h2>{requests.length} question(s)</h2>
          <ol>
            {requests.map((r, i) => (
              <li className="question" key={i}>
                <code>{r.name}</code> <code>{JSON.stringify(r.args)}</code>
                {r.description && <div>{r.description}</div>}
              </li>
            ))}
          </ol>
          <button id="approve-all" onClick={approveAll}>Approve all</button>
        </section>
      )}
      <textarea id="draft" value={draft} onChange={(e) => setDraft(e.target.value)} />
      <textarea id="plan" placeholder="plan (JSON, optional)" value={plan}
        onChange={(e) => setPlan(e.target.value)} />
      <button id="send" onClick={send} disabled={stream.isLoading}>Send</button>
      <button id="cancel" onClick={cancel} disabled={!stream.isLoading}>Cancel</button>
    </main>
  );
}
