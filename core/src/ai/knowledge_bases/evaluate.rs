//! MindsDB's `EVALUATE KNOWLEDGE_BASE kb USING test_table = db.t, …`: how well a knowledge
//! base finds the document each test question was written from.
//!
//! - `generate_data = true | {"from_sql": "SELECT id, content FROM …", "count": 20}` first
//!   writes the test table: a sample of documents (the knowledge base's own chunks without
//!   `from_sql`), and for each a question the LLM (`llm = {…}`, else the knowledge base's
//!   reranking model's settings, else the default LLM) writes from its text, as
//!   `(text, question, answer, doc_id)`.
//! - Then (unless `evaluate = false`) each question of the test table (`question`, `doc_id`)
//!   is searched for, the best 20 chunks, and the answer is one row: `total` questions,
//!   `total_found` (the document among the 20), `retrieved_in_top_10`, `cumulative_recall`
//!   (JSON: position → share of questions found at or before it), `avg_query_time` (seconds),
//!   `id`, `name`, `created_at`; `save_to = db.t` appends it to a table as well.
//!
//! Every search and write is an ordinary statement of the caller's, the question bound as a
//! parameter, never spliced. Only MindsDB's `version = 'doc_id'` is here; its
//! `llm_relevancy` (the LLM scoring each found chunk) is refused by name.

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{
    Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::StreamExt;
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::services::llm;
use crate::sql::{Outcome, QueryRequest, ResultContext, SqlRunner, TableResult};
use crate::tenant::TenantId;

/// Chunks searched per question (MindsDB's doc_id evaluator's).
const TOP_K: usize = 20;
/// Questions generated when `count` is not given.
const DEFAULT_COUNT: u64 = 20;
/// Rows sampled from for generating at most.
const SAMPLE_ROWS: usize = 10_000;
/// Questions one evaluation asks at most: each is a search (an embedding call).
const MAX_QUESTIONS: usize = 1000;
/// LLM replies that hold no question before generating gives up (as MindsDB's).
const MAX_GENERATION_ERRORS: usize = 5;

/// What the LLM is told when it writes a test question.
const QUESTION_PROMPT: &str = "You write test questions for a search engine. You are given one \
text; write one question that this text answers, with enough specific detail (names, \
numbers, places) that the text, and no other document, is the one to find; never a vague \
question such as \"What is being amended?\". Also give the answer the text holds. Reply with \
JSON only, nothing else: {\"query\": \"the question\", \"reference_answer\": \"the answer\"}.";

/// `test_table = db.t` and `save_to = db.t` name tables: their dotted names become text before
/// the settings are read as values.
pub(crate) fn names_as_text(words: &[&Token]) -> Vec<Token> {
    // bounded: the statement's tokens, in memory
    let mut out: Vec<Token> = Vec::with_capacity(words.len());
    let mut k = 0;
    while k < words.len() {
        let names_table = k >= 2
            && words[k - 1] == &Token::Eq
            && matches!(words[k - 2], Token::Word(key)
                if ["test_table", "save_to"].contains(&key.value.to_ascii_lowercase().as_str()));
        match words[k] {
            Token::Word(first) if names_table && first.quote_style.is_none() => {
                let mut parts = vec![first.value.clone()];
                while let (Some(Token::Period), Some(Token::Word(next))) =
                    (words.get(k + 1), words.get(k + 2))
                {
                    parts.push(next.value.clone());
                    k += 2;
                }
                out.push(Token::SingleQuotedString(parts.join(".")));
            }
            other => out.push(other.clone()),
        }
        k += 1;
    }
    out
}

/// The settings of one evaluation.
struct Evaluation {
    test_table: String,
    generate: Option<(Option<String>, u64)>,
    evaluate: bool,
    llm: Option<Map<String, Value>>,
    save_to: Option<String>,
}

impl Evaluation {
    fn of(using: Vec<(String, Value)>) -> Result<Evaluation> {
        let mut evaluation = Evaluation {
            test_table: String::new(),
            generate: None,
            evaluate: true,
            llm: None,
            save_to: None,
        };
        for (key, value) in using {
            match (key.as_str(), value) {
                ("test_table", Value::String(t)) => evaluation.test_table = table_name(&t)?,
                ("save_to", Value::String(t)) => evaluation.save_to = Some(table_name(&t)?),
                ("version", Value::String(v)) if v.eq_ignore_ascii_case("doc_id") => {}
                ("version", Value::String(v)) if v.eq_ignore_ascii_case("llm_relevancy") => {
                    return Err(Error::invalid(
                        "version = 'llm_relevancy' is not available here; version = 'doc_id' \
                         (the default) is",
                    ))
                }
                ("generate_data", Value::Bool(on)) => {
                    evaluation.generate = on.then_some((None, DEFAULT_COUNT))
                }
                ("generate_data", Value::Object(settings)) => {
                    let mut from_sql = None;
                    let mut count = DEFAULT_COUNT;
                    for (k, v) in settings {
                        match (k.as_str(), v) {
                            ("from_sql", Value::String(sql)) => from_sql = Some(sql),
                            ("count", Value::Number(n))
                                if n.as_u64()
                                    .is_some_and(|n| (1..=MAX_QUESTIONS as u64).contains(&n)) =>
                            {
                                count = n.as_u64().unwrap_or(DEFAULT_COUNT)
                            }
                            (k, v) => {
                                return Err(Error::invalid(format!(
                                    "generate_data takes from_sql (a SELECT) and count (1 to \
                                     {MAX_QUESTIONS}); got {k} = {v}"
                                )))
                            }
                        }
                    }
                    evaluation.generate = Some((from_sql, count));
                }
                ("evaluate", Value::Bool(on)) => evaluation.evaluate = on,
                ("llm", Value::Object(settings)) => evaluation.llm = Some(settings),
                (key, value) => {
                    return Err(Error::invalid(format!(
                        "EVALUATE KNOWLEDGE_BASE takes test_table = db.table, version = \
                         'doc_id', generate_data = true | {{…}}, evaluate = true | false, llm = \
                         {{…}}, save_to = db.table; got {key} = {value}"
                    )))
                }
            }
        }
        if evaluation.test_table.is_empty() {
            return Err(Error::invalid(
                "EVALUATE KNOWLEDGE_BASE needs test_table = db.table: the questions (question, \
                 doc_id), or where generate_data writes them",
            ));
        }
        Ok(evaluation)
    }
}

/// `db.table` (two or three parts), each quoted as a name.
fn table_name(text: &str) -> Result<String> {
    let parts: Vec<&str> = text.split('.').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
        return Err(Error::invalid(format!(
            "'{text}' must name a table as database.table"
        )));
    }
    Ok(parts
        .iter()
        .map(|p| format!("`{}`", p.replace('`', "``")))
        .collect::<Vec<_>>()
        .join("."))
}

impl SqlRunner {
    /// Runs `EVALUATE KNOWLEDGE_BASE project.name USING …`.
    pub(crate) async fn evaluate_knowledge_base(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        project: &str,
        name: &str,
        using: Vec<(String, Value)>,
    ) -> Result<Outcome> {
        let evaluation = Evaluation::of(using)?;
        let snapshot =
            crate::sql::catalog::snapshot::Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let kb = snapshot
            .knowledge_base(project, name)?
            .ok_or_else(|| crate::catalog::knowledge_bases::missing(name))?;
        let kb_table = format!(
            "`{}`.`{}`",
            project.replace('`', "``"),
            kb.name.replace('`', "``")
        );
        if let Some((from_sql, count)) = &evaluation.generate {
            let settings = evaluation
                .llm
                .clone()
                .or_else(|| kb.reranking_model.clone())
                .unwrap_or_default();
            // Columns by name, as MindsDB takes them: `from_sql` gives `id` and `content` in
            // any order, among others.
            let rows = match from_sql {
                Some(sql) => self
                    .rows_of(
                        tenant,
                        context,
                        &format!("SELECT content, id FROM ({sql}) AS __source LIMIT {SAMPLE_ROWS}"),
                        &[],
                    )
                    .await
                    .map_err(|e| {
                        Error::new(
                            e.kind(),
                            format!(
                                "generate_data's from_sql must give the columns id and content: {}",
                                e.message()
                            ),
                        )
                    })?,
                None => {
                    let sql =
                        format!("SELECT chunk_content, id FROM {kb_table} LIMIT {SAMPLE_ROWS}");
                    self.rows_of(tenant, context, &sql, &[]).await?
                }
            };
            let rows = sample(rows, *count as usize);
            let endpoint = llm::endpoint(&settings, &self.services.settings.llm());
            let connector = self.services.connector();
            let mut generated = Vec::new();
            let mut errors = 0;
            for (content, id) in rows {
                let messages = [
                    json!({"role": "system", "content": QUESTION_PROMPT}),
                    json!({"role": "user", "content": format!("Text:\n{content}")}),
                ];
                let reply =
                    llm::chat(&connector.client, &endpoint, &messages, &[], None, None).await?;
                match question_of(&reply.content) {
                    Some((question, answer)) => generated.push((content, question, answer, id)),
                    None => {
                        errors += 1;
                        if errors > MAX_GENERATION_ERRORS {
                            return Err(llm::upstream(format!(
                                "The LLM's replies held no question {errors} times; the last: {}",
                                crate::egress::excerpt(&reply.content, 300)
                            )));
                        }
                    }
                }
            }
            if generated.is_empty() {
                return Err(Error::invalid("No test question could be generated"));
            }
            let table = &evaluation.test_table;
            self.statement(
                tenant,
                context,
                &format!(
                    "CREATE OR REPLACE TABLE {table} (text TEXT, question TEXT, answer TEXT, doc_id TEXT)"
                ),
                Map::new(),
            )
            .await?;
            for (text, question, answer, doc_id) in generated {
                let params: Map<String, Value> =
                    [("t", text), ("q", question), ("a", answer), ("d", doc_id)]
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), Value::String(v)))
                        .collect();
                self.statement(
                    tenant,
                    context,
                    &format!("INSERT INTO {table} VALUES (:t, :q, :a, :d)"),
                    params,
                )
                .await?;
            }
        }
        if !evaluation.evaluate {
            return Ok(Outcome::Ok {
                affected_rows: None,
            });
        }
        let questions = self
            .rows_of(
                tenant,
                context,
                &format!(
                    "SELECT CAST(question AS TEXT), CAST(doc_id AS TEXT) FROM {} LIMIT {}",
                    evaluation.test_table,
                    MAX_QUESTIONS + 1
                ),
                &[],
            )
            .await
            .map_err(|e| {
                Error::new(
                    e.kind(),
                    format!(
                        "The test table must have the columns question and doc_id: {}",
                        e.message()
                    ),
                )
            })?;
        if questions.len() > MAX_QUESTIONS {
            return Err(Error::invalid(format!(
                "The test table has more than {MAX_QUESTIONS} questions, the most one evaluation asks"
            )));
        }
        if questions.is_empty() {
            return Err(Error::invalid("The test table has no questions"));
        }
        // bounded: at most MAX_QUESTIONS
        let mut positions = Vec::with_capacity(questions.len());
        let mut seconds = 0.0;
        for (question, doc_id) in &questions {
            let started = Instant::now();
            let found = self
                .rows_of(
                    tenant,
                    context,
                    &format!("SELECT id, id FROM {kb_table} WHERE content = :q LIMIT {TOP_K}"),
                    &[("q", question)],
                )
                .await?;
            seconds += started.elapsed().as_secs_f64();
            positions.push(found.iter().position(|(id, _)| id == doc_id));
        }
        let row = summary(&positions, seconds, &kb.name);
        if let Some(table) = &evaluation.save_to {
            self.statement(
                tenant,
                context,
                &format!(
                    "CREATE TABLE IF NOT EXISTS {table} (total BIGINT, total_found BIGINT, \
                     retrieved_in_top_10 BIGINT, cumulative_recall TEXT, avg_query_time DOUBLE, \
                     id BIGINT, name TEXT, created_at TEXT)"
                ),
                Map::new(),
            )
            .await?;
            self.statement(
                tenant,
                context,
                &format!(
                    "INSERT INTO {table} VALUES (:total, :found, :top10, :recall, :time, :id, \
                     :name, :created)"
                ),
                row.params(),
            )
            .await?;
        }
        row.outcome()
    }

    /// The rows of `sql` (two text columns), `params` bound as values.
    async fn rows_of(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        sql: &str,
        params: &[(&str, &String)],
    ) -> Result<Vec<(String, String)>> {
        let mut request = QueryRequest::on_behalf(sql, &context.db);
        for (name, value) in params {
            request
                .params
                .insert(name.to_string(), Value::String((*value).clone()));
        }
        let Outcome::Table(mut table) = (match self.run(tenant, &request).await.outcome {
            Outcome::Error(e) => return Err(e),
            other => other,
        }) else {
            return Err(Error::internal(
                "a query of the evaluation answered no rows",
            ));
        };
        let mut out = Vec::new();
        while let Some(batch) = table.stream.next().await {
            let batch = batch?;
            if batch.num_columns() < 2 {
                return Err(Error::invalid("The query must give two columns"));
            }
            let text = |i: usize| -> Result<ArrayRef> {
                Ok(datafusion::arrow::compute::cast(
                    batch.column(i),
                    &DataType::Utf8,
                )?)
            };
            let (a, b) = (text(0)?, text(1)?);
            let (a, b) = (
                a.as_any().downcast_ref::<StringArray>(),
                b.as_any().downcast_ref::<StringArray>(),
            );
            let (Some(a), Some(b)) = (a, b) else {
                return Err(Error::internal("a cast to text gave no text"));
            };
            for row in 0..batch.num_rows() {
                if a.is_valid(row) && b.is_valid(row) {
                    out.push((a.value(row).to_string(), b.value(row).to_string()));
                }
            }
        }
        Ok(out)
    }

    /// Runs one statement of the evaluation's (a write), `params` bound as values.
    async fn statement(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        sql: &str,
        params: Map<String, Value>,
    ) -> Result<()> {
        let request = QueryRequest {
            params: params.into_iter().collect(),
            ..QueryRequest::on_behalf(sql, &context.db)
        };
        match self.run(tenant, &request).await.outcome {
            Outcome::Error(e) => Err(e),
            _ => Ok(()),
        }
    }
}

/// `count` of `rows`, picked evenly from a seeded shuffle, so a run can be repeated.
fn sample<T>(mut rows: Vec<T>, count: usize) -> Vec<T> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..rows.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        rows.swap(i, (state % (i as u64 + 1)) as usize);
    }
    rows.truncate(count);
    rows
}

/// The question and answer of an LLM's reply: its first JSON object with `query` and
/// `reference_answer` (markdown fences and words around it allowed).
fn question_of(reply: &str) -> Option<(String, String)> {
    let start = reply.find('{')?;
    let mut stream = serde_json::Deserializer::from_str(&reply[start..]).into_iter::<Value>();
    let object = stream.next()?.ok()?;
    let text = |key: &str| object.get(key)?.as_str().map(str::to_string);
    Some((text("query")?, text("reference_answer")?))
}

/// One evaluation's result row.
struct Summary {
    total: i64,
    found: i64,
    top10: i64,
    recall: String,
    avg_time: f64,
    id: i64,
    name: String,
    created_at: String,
}

/// The result of questions whose documents were found at `positions` (`None`: not among the
/// best [`TOP_K`]).
fn summary(positions: &[Option<usize>], seconds: f64, name: &str) -> Summary {
    let total = positions.len();
    let mut recall = Map::new();
    let mut at_or_before = 0usize;
    for k in 0..TOP_K {
        at_or_before += positions.iter().filter(|p| **p == Some(k)).count();
        recall.insert(
            k.to_string(),
            json!(at_or_before as f64 / total.max(1) as f64),
        );
    }
    Summary {
        total: total as i64,
        found: positions.iter().filter(|p| p.is_some()).count() as i64,
        top10: positions
            .iter()
            .filter(|p| p.is_some_and(|p| p < 10))
            .count() as i64,
        recall: Value::Object(recall).to_string(),
        avg_time: seconds / total.max(1) as f64,
        id: crate::time::now_unix() as i64,
        name: name.to_string(),
        created_at: crate::time::now_text(),
    }
}

impl Summary {
    fn params(&self) -> Map<String, Value> {
        [
            ("total", json!(self.total)),
            ("found", json!(self.found)),
            ("top10", json!(self.top10)),
            ("recall", json!(self.recall)),
            ("time", json!(self.avg_time)),
            ("id", json!(self.id)),
            ("name", json!(self.name)),
            ("created", json!(self.created_at)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn outcome(self) -> Result<Outcome> {
        let int = |name: &str| Field::new(name, DataType::Int64, false);
        let text = |name: &str| Field::new(name, DataType::Utf8, false);
        let schema = Arc::new(Schema::new(vec![
            int("total"),
            int("total_found"),
            int("retrieved_in_top_10"),
            text("cumulative_recall"),
            Field::new("avg_query_time", DataType::Float64, false),
            int("id"),
            text("name"),
            text("created_at"),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![self.total])),
            Arc::new(Int64Array::from(vec![self.found])),
            Arc::new(Int64Array::from(vec![self.top10])),
            Arc::new(StringArray::from(vec![self.recall])),
            Arc::new(Float64Array::from(vec![self.avg_time])),
            Arc::new(Int64Array::from(vec![self.id])),
            Arc::new(StringArray::from(vec![self.name])),
            Arc::new(StringArray::from(vec![self.created_at])),
        ];
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        let column_names = schema.fields().iter().map(|f| f.name().clone()).collect();
        let stream = MemoryStream::try_new(vec![batch], schema, None)?;
        Ok(Outcome::Table(TableResult {
            column_names,
            stream: Box::pin(stream),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_give_their_question_and_answer() {
        assert_eq!(
            question_of("```json\n{\"query\": \"Who?\", \"reference_answer\": \"Ada\"}\n```"),
            Some(("Who?".into(), "Ada".into()))
        );
        assert_eq!(question_of("no json here"), None);
        assert_eq!(question_of("{\"query\": \"Who?\"}"), None);
    }

    #[test]
    fn the_summary_counts_found_documents_by_position() {
        let s = summary(&[Some(0), Some(12), None, Some(3)], 2.0, "kb");
        assert_eq!((s.total, s.found, s.top10), (4, 3, 2));
        let recall: Value = serde_json::from_str(&s.recall).unwrap();
        assert_eq!(recall["0"], 0.25);
        assert_eq!(recall["3"], 0.5);
        assert_eq!(recall["19"], 0.75);
        assert_eq!(s.avg_time, 0.5);
    }

    #[test]
    fn tables_are_named_as_database_dot_table() {
        assert_eq!(table_name("files.qa").unwrap(), "`files`.`qa`");
        assert!(table_name("qa").is_err());
        assert!(table_name("a..b").is_err());
    }
}
