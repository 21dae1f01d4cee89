//! How an agent answers: a system prompt with its instruction and the schema and a
//! few sample rows of its tables, a `sql_query` tool whose calls run in the read-only sandbox,
//! tool results (or refusals) handed back to the model, a bounded number of steps, and the
//! final text as the answer. Progress can be watched as [`AgentEvent`]s in MindsDB's shapes.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::mpsc::Sender;

use super::ask::AskAgent;
use super::sandbox::{Allowed, ToolRows};
use crate::catalog::agents::{split_entry, Agent};
use crate::catalog::quotas::Question;
use crate::config::Config;
use crate::egress::HttpClient;
use crate::error::{Error, ErrorKind, Result};
use crate::services::llm;
use crate::sql::SqlRunner;
use crate::tenant::TenantId;

/// A finished answer, as `POST …/agents/{name}/completions` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The assistant's text.
    pub content: String,
    /// An id for this answer, for matching logs and traces.
    pub trace_id: String,
}

impl Answer {
    /// MindsDB's completion body: `{"message": {"content", "role": "assistant", "trace_id"}}`.
    pub fn to_wire_json(&self) -> Value {
        json!({"message": {"content": self.content, "role": "assistant", "trace_id": self.trace_id}})
    }
}

/// One step of a streamed answer, in the shapes MindsDB's stream sends (`docs/mindsdb-wire.md` §3).
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A note on progress, such as a refused query: `{"type": "context", "content": …}`.
    Context(String),
    /// SQL the model ran: `{"type": "sql", "content": …}`.
    Sql(String),
    /// A query's result as a markdown table: `{"type": "data", "content": …}`.
    Data(String),
    /// A piece of the answer's text: `{"type": "data", "text": …}`.
    Text(String),
    /// The answer failed: `{"error": …}`.
    Error(String),
    /// Always last: `{"type": "end"}`.
    End,
}

impl AgentEvent {
    /// The event as MindsDB's stream frames it (one `data:` line each).
    pub fn to_wire_json(&self) -> Value {
        match self {
            AgentEvent::Context(text) => json!({"type": "context", "content": text}),
            AgentEvent::Sql(text) => json!({"type": "sql", "content": text}),
            AgentEvent::Data(table) => json!({"type": "data", "content": table}),
            AgentEvent::Text(text) => json!({"type": "data", "text": text}),
            AgentEvent::Error(text) => json!({"error": text}),
            AgentEvent::End => json!({"type": "end"}),
        }
    }

    /// The event as one server-sent event, `data: <json>\n\n`, the JSON spaced as Python's
    /// `json.dumps` spaces it (`{"type": "end"}`), which is what MindsDB sends.
    pub fn to_sse_frame(&self) -> Vec<u8> {
        let mut frame = b"data: ".to_vec();
        let mut serializer = serde_json::Serializer::with_formatter(&mut frame, PythonSpacing);
        serde::Serialize::serialize(&self.to_wire_json(), &mut serializer)
            .expect("a JSON value always serializes");
        frame.extend_from_slice(b"\n\n");
        frame
    }
}

/// `", "` between items and `": "` after keys, as Python's `json.dumps` writes them.
struct PythonSpacing;

fn separate<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

impl serde_json::ser::Formatter for PythonSpacing {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separate(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separate(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

/// Reads a completion request's `messages`: `[{"role", "content"}]` or the legacy
/// `[{"question", "answer"}]`, into chat messages; the last one must be the user's.
pub(crate) fn read_messages(messages: &Value) -> Result<Vec<Value>> {
    let list = messages.as_array().ok_or_else(|| {
        Error::invalid("'messages' must be a list of {\"role\", \"content\"} objects")
    })?;
    let mut out = Vec::new();
    for (i, message) in list.iter().enumerate() {
        let text = |key: &str| message.get(key).and_then(Value::as_str);
        if let Some(question) = text("question") {
            out.push(json!({"role": "user", "content": question}));
            if let Some(answer) = text("answer") {
                out.push(json!({"role": "assistant", "content": answer}));
            }
            continue;
        }
        match (text("role"), text("content")) {
            (Some(role @ ("user" | "assistant")), Some(content)) => {
                out.push(json!({"role": role, "content": content}))
            }
            _ => {
                return Err(Error::invalid(format!(
                    "Message {i} must be {{\"role\": \"user\" or \"assistant\", \"content\": text}} or {{\"question\": text, \"answer\": text or null}}"
                )))
            }
        }
    }
    match out.last() {
        Some(last) if last["role"] == "user" => Ok(out),
        Some(_) => Err(Error::invalid(
            "The last message must be the user's question",
        )),
        None => Err(Error::invalid(
            "'messages' is empty: there is no question to answer",
        )),
    }
}

/// Events an answer may have waiting for a slow reader before the agent waits for it.
pub(crate) const EVENT_BUFFER: usize = 64;

/// What answering needs from the engine.
pub(crate) struct Asker<'a> {
    pub(crate) sql: &'a SqlRunner,
    pub(crate) client: &'a HttpClient,
    pub(crate) config: &'a Config,
    pub(crate) tenant: TenantId,
    /// Provider calls made so far (a question that made any stays counted, however it ends).
    pub(crate) calls: Arc<AtomicU64>,
}

impl<'a> Asker<'a> {
    /// An asker for `tenant` over the engine's parts.
    pub(crate) fn new(sql: &'a SqlRunner, config: &'a Config, tenant: TenantId) -> Asker<'a> {
        Asker {
            sql,
            client: &sql.services.client,
            config,
            tenant,
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// [`Asker::answer`] for a question counted against the quota: it stays counted when
    /// answered, and once the provider was called, however the answer ends (failed, stopped,
    /// or dropped by a caller who stopped waiting: the question counts the calls as they are
    /// made); one that ended before any call is given back.
    pub(crate) async fn answer_counted(
        &self,
        question: Question,
        agent: &Agent,
        messages: Vec<Value>,
        events: Option<&Sender<AgentEvent>>,
    ) -> Result<Answer> {
        let counted = Asker {
            calls: question.calls(),
            ..*self
        };
        let answer = counted.answer(agent, messages, events).await;
        if answer.is_ok() {
            question.answered();
        } else {
            question.give_back().await;
        }
        answer
    }

    /// Answers the conversation `messages` with `agent`. With `events`, progress and the
    /// answer's text are sent there as they happen (the caller adds [`AgentEvent::End`]).
    pub(crate) async fn answer(
        &self,
        agent: &Agent,
        messages: Vec<Value>,
        events: Option<&Sender<AgentEvent>>,
    ) -> Result<Answer> {
        let run = self.run(agent, messages, events);
        let content = match agent.timeout_secs() {
            None => run.await?,
            Some(secs) => tokio::time::timeout(Duration::from_secs(secs), run)
                .await
                .map_err(|_| {
                    Error::new(
                        ErrorKind::Upstream,
                        format!("The agent did not answer within its timeout of {secs} s"),
                    )
                })??,
        };
        Ok(Answer {
            content,
            trace_id: trace_id(),
        })
    }

    async fn run(
        &self,
        agent: &Agent,
        mut history: Vec<Value>,
        events: Option<&Sender<AgentEvent>>,
    ) -> Result<String> {
        // Named like the refusal of its URL when the agent was saved.
        let endpoint = llm::endpoint(&agent.model(), &self.sql.services.settings.llm())
            .named_by("model.base_url");
        let allowed = allowed_tables(agent);
        let limits = &self.config.agents;
        let mut messages =
            vec![json!({"role": "system", "content": self.system_prompt(agent, &allowed).await?})];
        messages.append(&mut history);
        let tools = [sql_tool(limits.row_limit)];
        for _ in 0..limits.max_steps.max(1) {
            let mut forward =
                |text: String| -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
                    let events = events.cloned();
                    Box::pin(async move {
                        if let Some(events) = events {
                            let _ = events.send(AgentEvent::Text(text)).await;
                        }
                    })
                };
            let on_text: Option<llm::TextSink<'_>> = match events {
                Some(_) => Some(&mut forward),
                None => None,
            };
            let reply = llm::chat(
                self.client,
                &endpoint,
                &messages,
                &tools,
                on_text,
                Some(&self.calls),
            )
            .await?;
            if reply.tool_calls.is_empty() {
                return Ok(reply.content);
            }
            messages.push(reply.to_message());
            for call in &reply.tool_calls {
                let content = if call.name == "sql_query" {
                    self.run_tool(agent, &call.arguments, &allowed, events)
                        .await
                } else {
                    json!({"error": format!("There is no tool '{}'; the only tool is sql_query", call.name)})
                };
                messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": content.to_string()}));
            }
        }
        Err(Error::new(
            ErrorKind::Upstream,
            format!(
                "The agent did not reach an answer within {} model calls",
                limits.max_steps.max(1)
            ),
        ))
    }

    /// Runs one `sql_query` call; its result or refusal as JSON for the model.
    async fn run_tool(
        &self,
        agent: &Agent,
        arguments: &str,
        allowed: &Allowed,
        events: Option<&Sender<AgentEvent>>,
    ) -> Value {
        let send = |event: AgentEvent| async move {
            if let Some(events) = events {
                let _ = events.send(event).await;
            }
        };
        let query = serde_json::from_str::<Value>(arguments)
            .ok()
            .and_then(|args| {
                args.get("query")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
        let Some(query) = query else {
            return json!({"error": "sql_query takes {\"query\": \"SELECT …\"}"});
        };
        send(AgentEvent::Sql(query.clone())).await;
        let limits = &self.config.agents;
        let ran = self
            .sql
            .sandboxed_query(
                self.tenant,
                &agent.project,
                &query,
                allowed,
                limits.row_limit,
                Duration::from_secs(limits.sql_timeout_secs),
            )
            .await;
        match ran {
            Ok(rows) => {
                send(AgentEvent::Data(markdown(&rows))).await;
                json!({"columns": rows.column_names, "rows": rows.rows, "truncated": rows.truncated})
            }
            Err(e) => {
                send(AgentEvent::Context(e.message().to_string())).await;
                json!({"error": e.message()})
            }
        }
    }

    /// The instruction, then each table the agent may read with its columns and sample rows.
    async fn system_prompt(&self, agent: &Agent, allowed: &Allowed) -> Result<String> {
        let mut prompt = agent
            .prompt_template()
            .unwrap_or("You are a helpful assistant that answers questions about data.")
            .to_string();
        let tables = self.sql.tables_matching(self.tenant, allowed).await?;
        if tables.is_empty() {
            prompt.push_str("\n\nYou have no tables to query.");
            return Ok(prompt);
        }
        prompt.push_str(
            "\n\nAnswer from the data. Use the sql_query tool to run one read-only SELECT at a time \
             (Apache DataFusion SQL; name tables as database.table). Only these tables can be read:\n",
        );
        let samples = self.config.agents.sample_rows;
        for shape in tables {
            let (db, table) = (&shape.db, &shape.table);
            let columns: Vec<String> = shape
                .columns
                .iter()
                .map(|(n, t)| format!("{n} {t}"))
                .collect();
            if shape.knowledge_base {
                prompt.push_str(&format!(
                    "\nKnowledge base {db}.{table} ({}): search it by meaning with SELECT chunk_content, metadata, relevance FROM {db}.{table} WHERE content = '<what to look for>' [AND <metadata conditions>] LIMIT <n>\n",
                    columns.join(", ")
                ));
            } else {
                prompt.push_str(&format!("\nTable {db}.{table} ({})\n", columns.join(", ")));
            }
            if samples == 0 {
                continue;
            }
            let sample = self
                .sql
                .sandboxed_query(
                    self.tenant,
                    &agent.project,
                    &format!("SELECT * FROM \"{db}\".\"{table}\" LIMIT {samples}"),
                    allowed,
                    samples,
                    Duration::from_secs(self.config.agents.sql_timeout_secs),
                )
                .await;
            if let Ok(rows) = sample {
                if !rows.rows.is_empty() {
                    prompt.push_str("Sample rows:\n");
                    prompt.push_str(&markdown(&rows));
                }
            }
        }
        Ok(prompt)
    }
}

/// The agent's `data.tables` and `data.knowledge_bases` as sandbox permissions.
fn allowed_tables(agent: &Agent) -> Allowed {
    let grants = |entries: Vec<String>| entries.iter().filter_map(|t| split_entry(t)).collect();
    Allowed {
        tables: grants(agent.tables()),
        knowledge_bases: grants(agent.knowledge_bases()),
    }
}

fn sql_tool(row_limit: usize) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "sql_query",
            "description": format!(
                "Runs one read-only SQL SELECT over the tables listed in the system message and returns up to {row_limit} rows as JSON."
            ),
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "One SELECT statement"}},
                "required": ["query"]
            }
        }
    })
}

/// Rows as a markdown table (MindsDB's stream shows query results this way).
fn markdown(rows: &ToolRows) -> String {
    let cell = |v: &Value| match v {
        Value::String(s) => s.replace('|', "\\|").replace('\n', " "),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let mut out = format!("| {} |\n", rows.column_names.join(" | "));
    // bounded: one per column of a tool query's result in memory
    out.push_str(&format!("|{}\n", " --- |".repeat(rows.column_names.len())));
    for row in &rows.rows {
        let cells: Vec<String> = row.iter().map(cell).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    if rows.truncated {
        out.push_str(&format!(
            "(only the first {} rows are shown)\n",
            rows.rows.len()
        ));
    }
    out
}

fn trace_id() -> String {
    let mut bytes = [0u8; 16];
    // Only an id for matching logs: a clock-based fallback is good enough if the OS says no.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        bytes = nanos.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The agent loop as SQL asks it (`SELECT answer FROM agent WHERE question = …`).
pub(crate) struct AgentLoop;

impl AskAgent for AgentLoop {
    fn ask<'a>(
        &'a self,
        runner: &'a SqlRunner,
        tenant: TenantId,
        counted: Question,
        agent: &'a Agent,
        question: String,
    ) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move {
            let answer = Asker::new(runner, &runner.services.config, tenant)
                .answer_counted(
                    counted,
                    agent,
                    vec![json!({"role": "user", "content": question})],
                    None,
                )
                .await?;
            Ok(answer.content)
        })
    }
}

/// The events of an answer being formed (`Engine::ask_agent_stream`). Dropping it stops the
/// agent: the task forming the answer is aborted.
pub struct AgentStream {
    receiver: tokio::sync::mpsc::Receiver<AgentEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl AgentStream {
    /// The stream of `task`, which sends its events to `receiver`'s sender.
    pub(crate) fn new(
        receiver: tokio::sync::mpsc::Receiver<AgentEvent>,
        task: tokio::task::JoinHandle<()>,
    ) -> AgentStream {
        AgentStream { receiver, task }
    }

    /// The next event; `None` after [`AgentEvent::End`].
    pub async fn next_event(&mut self) -> Option<AgentEvent> {
        self.receiver.recv().await
    }
}

impl Drop for AgentStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_message_forms_are_read() {
        let modern = read_messages(&json!([{"role": "user", "content": "hi"}])).unwrap();
        assert_eq!(modern, [json!({"role": "user", "content": "hi"})]);
        let legacy = read_messages(&json!([
            {"question": "a?", "answer": "b"},
            {"question": "c?", "answer": null}
        ]))
        .unwrap();
        assert_eq!(legacy.len(), 3);
        assert_eq!(legacy[2], json!({"role": "user", "content": "c?"}));
        assert!(read_messages(&json!([])).is_err());
        assert!(read_messages(&json!({"role": "user"})).is_err());
        assert!(read_messages(&json!([{"role": "system", "content": "x"}])).is_err());
    }

    #[test]
    fn results_become_markdown_tables() {
        let rows = ToolRows {
            column_names: vec!["region".into(), "total".into()],
            column_types: vec!["VARCHAR".into(), "BIGINT".into()],
            rows: vec![vec![json!("a|b"), json!(3)], vec![Value::Null, json!(1.5)]],
            truncated: true,
        };
        assert_eq!(
            markdown(&rows),
            "| region | total |\n| --- | --- |\n| a\\|b | 3 |\n|  | 1.5 |\n(only the first 2 rows are shown)\n"
        );
    }
}
