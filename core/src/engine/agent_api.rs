//! Agents through the facade: creating, reading, changing and dropping them, and asking
//! one, whole or streamed.

use std::sync::Arc;

use crate::ai::agents::answer::{self, AgentEvent, AgentStream, Answer, Asker};
use crate::catalog::agents::{self, Agent};
use crate::error::{Error, Result};

use super::{body_object, require_project, AbortOnDrop, Engine};

impl Engine {
    /// Creates an agent in `project` from MindsDB's request body (`{"name", "model", "data",
    /// "prompt_template", "params"}`, or the legacy top-level `model_name` and `provider`).
    /// Without a model the configured default is recorded. Errors: an unknown project is
    /// [`ErrorKind::NotFound`](crate::ErrorKind), a taken name `Conflict`; a missing name, a
    /// parameter outside MindsDB's set or a table that does not exist `InvalidInput`.
    pub async fn create_agent(&self, project: &str, spec: serde_json::Value) -> Result<Agent> {
        let tenant = self.tenant;
        let mut spec = body_object(spec)?;
        agents::qualify_knowledge_bases(&mut spec, self.inner.sql.default_project());
        let (project, llm) = (project.to_string(), self.inner.services.settings.llm());
        let egress = self.inner.services.net.egress.clone();
        let created = self
            .inner
            .services
            .store
            .write(move |txn| agents::create(txn, tenant, &project, &spec, &llm, false, &egress))
            .await?;
        created.ok_or_else(|| Error::internal("an agent was not created and no error said why"))
    }

    /// The agents of `project`, by name.
    pub fn list_agents(&self, project: &str) -> Result<Vec<Agent>> {
        let tenant = self.tenant;
        let txn = self.inner.services.store.read()?;
        require_project(&txn, tenant, project)?;
        agents::all(&txn, tenant, Some(project))
    }

    /// One agent by name (case-insensitive).
    pub fn get_agent(&self, project: &str, name: &str) -> Result<Agent> {
        let tenant = self.tenant;
        let txn = self.inner.services.store.read()?;
        require_project(&txn, tenant, project)?;
        agents::named(&txn, tenant, project, name)?.ok_or_else(|| agents::agent_missing(name))
    }

    /// Updates an agent as MindsDB's PUT does: shallow merge of the body into its params, a
    /// null dropping a key, a different `name` renaming it (`Conflict` when taken). A missing
    /// agent is `NotFound`: update never creates.
    pub async fn update_agent(
        &self,
        project: &str,
        name: &str,
        changes: serde_json::Value,
    ) -> Result<Agent> {
        let tenant = self.tenant;
        let mut changes = body_object(changes)?;
        agents::qualify_knowledge_bases(&mut changes, self.inner.sql.default_project());
        let (project, name) = (project.to_string(), name.to_string());
        let egress = self.inner.services.net.egress.clone();
        self.inner
            .services
            .store
            .write(move |txn| agents::update(txn, tenant, &project, &name, &changes, &egress))
            .await
    }

    /// Deletes an agent.
    pub async fn delete_agent(&self, project: &str, name: &str) -> Result<()> {
        let tenant = self.tenant;
        let (project, name) = (project.to_string(), name.to_string());
        self.inner
            .services
            .store
            .write(move |txn| agents::delete(txn, tenant, &project, &name, false))
            .await
            .map(|_| ())
    }

    /// Asks an agent. `messages` is a completion request's list: `[{"role", "content"}]` or
    /// the legacy `[{"question", "answer"}]`. A provider failure or timeout is
    /// [`ErrorKind::Upstream`](crate::ErrorKind) with the provider's message. For a user of
    /// the hosted edition the question counts against the plan's quota (unless it fails
    /// before the provider was called).
    pub async fn ask_agent(
        &self,
        project: &str,
        name: &str,
        messages: &serde_json::Value,
    ) -> Result<Answer> {
        let agent = self.get_agent(project, name)?;
        let messages = answer::read_messages(messages)?;
        self.answer(agent, messages).await
    }

    /// Answers `messages` with `agent`, the question counted against the tenant's quota first
    /// and given back if answering fails before the provider was called.
    pub(crate) async fn answer(
        &self,
        agent: Agent,
        messages: Vec<serde_json::Value>,
    ) -> Result<Answer> {
        let question = self.take_question().await?;
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        let task = async move {
            Asker::new(&inner.sql, &inner.services.config, tenant)
                .answer_counted(question, &agent, messages, None)
                .await
        };
        // Aborted when the caller stops waiting (a dropped request, Ctrl-C in Python), so a
        // question nobody waits for stops calling the provider.
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, task));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("agent task failed: {e}")))?
    }

    /// Asks an agent and follows the answer as it forms: queries it runs, their results, and
    /// the answer's text piece by piece, always ending with [`AgentEvent::End`]. Errors found
    /// before anything runs (unknown agent, bad messages, a question over quota) are returned
    /// here; later ones come as [`AgentEvent::Error`] followed by the end.
    pub async fn ask_agent_stream(
        &self,
        project: &str,
        name: &str,
        messages: &serde_json::Value,
    ) -> Result<AgentStream> {
        let agent = self.get_agent(project, name)?;
        let messages = answer::read_messages(messages)?;
        self.answer_stream(agent, messages).await
    }

    /// [`Engine::answer`], followed as it forms. The events wait in a small buffer: a reader
    /// that stops reading pauses the agent (and its provider stream) instead of filling memory.
    pub(crate) async fn answer_stream(
        &self,
        agent: Agent,
        messages: Vec<serde_json::Value>,
    ) -> Result<AgentStream> {
        let question = self.take_question().await?;
        let (sender, receiver) = tokio::sync::mpsc::channel(answer::EVENT_BUFFER);
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        let task = crate::memory::spawn_on(&self.inner.handle, async move {
            let answer = Asker::new(&inner.sql, &inner.services.config, tenant)
                .answer_counted(question, &agent, messages, Some(&sender))
                .await;
            if let Err(e) = answer {
                let _ = sender
                    .send(AgentEvent::Error(e.message().to_string()))
                    .await;
            }
            let _ = sender.send(AgentEvent::End).await;
        });
        Ok(AgentStream::new(receiver, task))
    }
}
