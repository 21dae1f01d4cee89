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
//! - `version = 'llm_relevancy'` judges the found chunks instead of looking for one document:
//!   the test table holds `(text, question, answer, id)`, each question's best 10 chunks are
//!   scored by the LLM as the reranker scores them (0 to 1; 0.5 and above is relevant), and
//!   the row is MindsDB's: `avg_relevancy`, `avg_relevance_score_by_k`,
//!   `avg_first_relevant_position`, `mean_mrr`, `hit_at_k`, `bin_precision_at_k` (lists as
//!   JSON), `avg_entropy`, `avg_ndcg`, `avg_query_time`, `id`, `name`, `created_at`.
//!
//! Every search and write is an ordinary statement of the caller's, the question bound as a
//! parameter, never spliced.

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
/// Chunks searched and scored per question by the `llm_relevancy` evaluator (MindsDB's).
const RELEVANCY_TOP_K: usize = 10;
/// A chunk scored at least this is relevant (MindsDB's binary relevancy).
const RELEVANT: f64 = 0.5;
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

/// What an evaluation measures (`version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// Whether the document each question was written from is found.
    DocId,
    /// How relevant the LLM finds the chunks found.
    LlmRelevancy,
}

/// The settings of one evaluation.
struct Evaluation {
    version: Version,
    test_table: String,
    generate: Option<(Option<String>, u64)>,
    evaluate: bool,
    llm: Option<Map<String, Value>>,
    save_to: Option<String>,
}

impl Evaluation {
    fn of(using: Vec<(String, Value)>) -> Result<Evaluation> {
        let mut evaluation = Evaluation {
            version: Version::DocId,
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
                ("version", Value::String(v)) if v.eq_ignore_ascii_case("doc_id") => {
                    evaluation.version = Version::DocId
                }
                ("version", Value::String(v)) if v.eq_ignore_ascii_case("llm_relevancy") => {
                    evaluation.version = Version::LlmRelevancy
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
                         'doc_id' | 'llm_relevancy', generate_data = true | {{…}}, evaluate = true | false, llm = \
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
        // The LLM that writes the questions and (llm_relevancy) scores the chunks.
        let settings = evaluation
            .llm
            .clone()
            .or_else(|| kb.reranking_model.clone())
            .unwrap_or_default();
        let relevancy = evaluation.version == Version::LlmRelevancy;
        if let Some((from_sql, count)) = &evaluation.generate {
            // Columns by name, as MindsDB takes them: `from_sql` gives `id` and `content` in
            // any order, among others.
            // llm_relevancy needs no document ids: the second column is the content again.
            let id = if relevancy { "content" } else { "id" };
            let rows = match from_sql {
                Some(sql) => self
                    .rows_of(
                        tenant,
                        context,
                        &format!(
                            "SELECT content, {id} FROM ({sql}) AS __source LIMIT {SAMPLE_ROWS}"
                        ),
                        &[],
                    )
                    .await
                    .map_err(|e| {
                        Error::new(
                            e.kind(),
                            format!(
                                "generate_data's from_sql must give the {}: {}",
                                if relevancy {
                                    "column content"
                                } else {
                                    "columns id and content"
                                },
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
            for (index, (content, id)) in rows.into_iter().enumerate() {
                let id = if relevancy { index.to_string() } else { id };
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
            let id_column = if relevancy {
                "id BIGINT"
            } else {
                "doc_id TEXT"
            };
            self.statement(
                tenant,
                context,
                &format!(
                    "CREATE OR REPLACE TABLE {table} (text TEXT, question TEXT, answer TEXT, {id_column})"
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
        if relevancy {
            return self
                .evaluate_relevancy(tenant, context, &evaluation, &kb_table, &kb.name, &settings)
                .await;
        }
        let questions = self
            .test_questions(tenant, context, &evaluation.test_table, "doc_id")
            .await?;
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
            let columns = "total BIGINT, total_found BIGINT, retrieved_in_top_10 BIGINT, \
                 cumulative_recall TEXT, avg_query_time DOUBLE, id BIGINT, name TEXT, created_at TEXT";
            let values = ":total, :found, :top10, :recall, :time, :id, :name, :created";
            self.save(tenant, context, table, columns, values, row.params())
                .await?;
        }
        row.outcome()
    }

    /// The `llm_relevancy` evaluation of the test table's questions (`question`, `answer`):
    /// each question's best chunks scored by the LLM, summed up as MindsDB sums them.
    async fn evaluate_relevancy(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        evaluation: &Evaluation,
        kb_table: &str,
        name: &str,
        settings: &Map<String, Value>,
    ) -> Result<Outcome> {
        let questions = self
            .test_questions(tenant, context, &evaluation.test_table, "answer")
            .await?;
        let connector = self.services.connector();
        // bounded: at most MAX_QUESTIONS
        let mut scored = Vec::with_capacity(questions.len());
        let mut seconds = 0.0;
        for (question, _answer) in &questions {
            let started = Instant::now();
            let found = self
                .rows_of(
                    tenant,
                    context,
                    &format!(
                        "SELECT chunk_content, id FROM {kb_table} WHERE content = :q LIMIT {RELEVANCY_TOP_K}"
                    ),
                    &[("q", question)],
                )
                .await?;
            seconds += started.elapsed().as_secs_f64();
            let chunks: Vec<String> = found.into_iter().map(|(chunk, _)| chunk).collect();
            let scores =
                crate::services::reranker::scores(&connector, settings, question, &chunks).await?;
            scored.push(scores);
        }
        let metrics = Relevancy::of(&scored, seconds, name);
        if let Some(table) = &evaluation.save_to {
            let columns = "avg_relevancy DOUBLE, avg_relevance_score_by_k TEXT, \
                 avg_first_relevant_position DOUBLE, mean_mrr DOUBLE, hit_at_k TEXT, \
                 bin_precision_at_k TEXT, avg_entropy DOUBLE, avg_ndcg DOUBLE, \
                 avg_query_time DOUBLE, id BIGINT, name TEXT, created_at TEXT";
            let values = ":relevancy, :by_k, :first, :mrr, :hits, :precision, :entropy, :ndcg, \
                 :time, :id, :name, :created";
            self.save(tenant, context, table, columns, values, metrics.params())
                .await?;
        }
        metrics.outcome()
    }

    /// The test table's questions, each with its `column` (`doc_id`, `answer`) as text; at
    /// most [`MAX_QUESTIONS`], at least one.
    async fn test_questions(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        table: &str,
        column: &str,
    ) -> Result<Vec<(String, String)>> {
        let sql = format!(
            "SELECT CAST(question AS TEXT), CAST({column} AS TEXT) FROM {table} LIMIT {}",
            MAX_QUESTIONS + 1
        );
        let questions = self
            .rows_of(tenant, context, &sql, &[])
            .await
            .map_err(|e| {
                Error::new(
                    e.kind(),
                    format!(
                        "The test table must have the columns question and {column}: {}",
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
        Ok(questions)
    }

    /// Appends one result row to `table` (`save_to`), making it with `columns` first when it
    /// does not exist; `values` names `params` in the columns' order.
    async fn save(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        table: &str,
        columns: &str,
        values: &str,
        params: Map<String, Value>,
    ) -> Result<()> {
        let create = format!("CREATE TABLE IF NOT EXISTS {table} ({columns})");
        self.statement(tenant, context, &create, Map::new()).await?;
        let insert = format!("INSERT INTO {table} VALUES ({values})");
        self.statement(tenant, context, &insert, params).await
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
        let fields = vec![
            int("total"),
            int("total_found"),
            int("retrieved_in_top_10"),
            text("cumulative_recall"),
            Field::new("avg_query_time", DataType::Float64, false),
            int("id"),
            text("name"),
            text("created_at"),
        ];
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
        one_row(Arc::new(Schema::new(fields)), columns)
    }
}

/// A result of one row.
fn one_row(schema: Arc<Schema>, columns: Vec<ArrayRef>) -> Result<Outcome> {
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
    let column_names = schema.fields().iter().map(|f| f.name().clone()).collect();
    let stream = MemoryStream::try_new(vec![batch], schema, None)?;
    Ok(Outcome::Table(TableResult {
        column_names,
        stream: Box::pin(stream),
    }))
}

/// One `llm_relevancy` evaluation's result row (MindsDB's `EvaluateRerank` metrics).
#[derive(Debug)]
struct Relevancy {
    avg_relevancy: f64,
    by_k: Vec<f64>,
    first_position: Option<f64>,
    mrr: f64,
    hit_at_k: Vec<f64>,
    precision_at_k: Vec<f64>,
    entropy: f64,
    ndcg: f64,
    avg_time: f64,
    id: i64,
    name: String,
    created_at: String,
}

/// Averages of `rows` column by column, as far as the shortest row goes (Python's `zip`),
/// rounded to two places as MindsDB shows them.
fn column_means(rows: &[Vec<f64>]) -> Vec<f64> {
    let width = rows.iter().map(Vec::len).min().unwrap_or(0);
    (0..width)
        .map(|k| {
            let mean = rows.iter().map(|row| row[k]).sum::<f64>() / rows.len() as f64;
            (mean * 100.0).round() / 100.0
        })
        .collect()
}

impl Relevancy {
    /// The metrics of questions whose found chunks scored `scores` (each question's, in the
    /// order found), searches having taken `seconds` in all.
    fn of(scores: &[Vec<f64>], seconds: f64, name: &str) -> Relevancy {
        let (mut relevancy, mut mrr, mut entropy, mut ndcg) = (0.0, 0.0, 0.0, 0.0);
        let mut firsts = Vec::new();
        let (mut hits, mut precisions, mut by_k) = (Vec::new(), Vec::new(), Vec::new());
        let mut queries = 0usize;
        for question in scores {
            let relevant: Vec<bool> = question.iter().map(|s| *s >= RELEVANT).collect();
            let first = relevant.iter().position(|r| *r);
            if let Some(first) = first {
                firsts.push(first as f64);
            }
            mrr += first.map_or(0.0, |p| 1.0 / (p as f64 + 1.0));
            let mut found = 0usize;
            let (mut hit_row, mut precision_row) = (Vec::new(), Vec::new());
            for (k, r) in relevant.iter().enumerate() {
                found += usize::from(*r);
                hit_row.push(if found > 0 { 1.0 } else { 0.0 });
                precision_row.push(found as f64 / (k + 1) as f64);
            }
            hits.push(hit_row);
            precisions.push(precision_row);
            if question.is_empty() {
                // No chunk found: MindsDB leaves such a question out of relevancy, entropy and
                // nDCG, but counts it (with a reciprocal rank of 0) in MRR.
                continue;
            }
            queries += 1;
            relevancy += question.iter().sum::<f64>() / question.len() as f64;
            by_k.push(question.clone());
            entropy += if question.len() > 1 {
                let total: f64 = question.iter().sum();
                if total > 0.0 {
                    -question
                        .iter()
                        .filter(|s| **s > 0.0)
                        .map(|s| (s / total) * (s / total).ln())
                        .sum::<f64>()
                } else {
                    0.0
                }
            } else {
                0.0
            };
            let dcg = |scores: &[f64]| -> f64 {
                scores
                    .iter()
                    .enumerate()
                    .map(|(i, s)| s / (i as f64 + 2.0).log2())
                    .sum()
            };
            let mut ideal = question.clone();
            ideal.sort_by(|a, b| b.total_cmp(a));
            let best = dcg(&ideal);
            ndcg += if best > 0.0 {
                dcg(question) / best
            } else {
                0.0
            };
        }
        let total = scores.len().max(1) as f64;
        Relevancy {
            avg_relevancy: relevancy / total,
            by_k: column_means(&by_k),
            first_position: (!firsts.is_empty())
                .then(|| firsts.iter().sum::<f64>() / firsts.len() as f64),
            mrr: mrr / total,
            hit_at_k: column_means(&hits),
            precision_at_k: column_means(&precisions),
            entropy: entropy / queries.max(1) as f64,
            ndcg: ndcg / queries.max(1) as f64,
            avg_time: seconds / total,
            id: crate::time::now_unix() as i64,
            name: name.to_string(),
            created_at: crate::time::now_text(),
        }
    }

    fn params(&self) -> Map<String, Value> {
        [
            ("relevancy", json!(self.avg_relevancy)),
            ("by_k", json!(json!(self.by_k).to_string())),
            ("first", json!(self.first_position)),
            ("mrr", json!(self.mrr)),
            ("hits", json!(json!(self.hit_at_k).to_string())),
            ("precision", json!(json!(self.precision_at_k).to_string())),
            ("entropy", json!(self.entropy)),
            ("ndcg", json!(self.ndcg)),
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
        let number = |name: &str| Field::new(name, DataType::Float64, false);
        let text = |name: &str| Field::new(name, DataType::Utf8, false);
        let fields = vec![
            number("avg_relevancy"),
            text("avg_relevance_score_by_k"),
            Field::new("avg_first_relevant_position", DataType::Float64, true),
            number("mean_mrr"),
            text("hit_at_k"),
            text("bin_precision_at_k"),
            number("avg_entropy"),
            number("avg_ndcg"),
            number("avg_query_time"),
            Field::new("id", DataType::Int64, false),
            text("name"),
            text("created_at"),
        ];
        let list = |values: &[f64]| json!(values).to_string();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(vec![self.avg_relevancy])),
            Arc::new(StringArray::from(vec![list(&self.by_k)])),
            Arc::new(Float64Array::from(vec![self.first_position])),
            Arc::new(Float64Array::from(vec![self.mrr])),
            Arc::new(StringArray::from(vec![list(&self.hit_at_k)])),
            Arc::new(StringArray::from(vec![list(&self.precision_at_k)])),
            Arc::new(Float64Array::from(vec![self.entropy])),
            Arc::new(Float64Array::from(vec![self.ndcg])),
            Arc::new(Float64Array::from(vec![self.avg_time])),
            Arc::new(Int64Array::from(vec![self.id])),
            Arc::new(StringArray::from(vec![self.name])),
            Arc::new(StringArray::from(vec![self.created_at])),
        ];
        one_row(Arc::new(Schema::new(fields)), columns)
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
    fn relevancy_metrics_are_mindsdbs() {
        // Question 1: relevant at positions 1 and 2 (0-based); question 2: nothing relevant.
        let m = Relevancy::of(&[vec![0.2, 0.9, 0.6], vec![0.1, 0.0, 0.3]], 1.0, "kb");
        assert!((m.mrr - 0.25).abs() < 1e-9, "{m:?}");
        assert_eq!(m.hit_at_k, [0.0, 0.5, 0.5]);
        assert_eq!(m.precision_at_k, [0.0, 0.25, 0.33]);
        assert_eq!(m.first_position, Some(1.0));
        assert_eq!(m.by_k, [0.15, 0.45, 0.45]);
        let expected_relevancy = ((0.2 + 0.9 + 0.6) / 3.0 + (0.1 + 0.0 + 0.3) / 3.0) / 2.0;
        assert!((m.avg_relevancy - expected_relevancy).abs() < 1e-9);
        // nDCG of the first question: its order against the best order.
        let dcg = |s: &[f64]| -> f64 {
            s.iter()
                .enumerate()
                .map(|(i, v)| v / (i as f64 + 2.0).log2())
                .sum()
        };
        let first = dcg(&[0.2, 0.9, 0.6]) / dcg(&[0.9, 0.6, 0.2]);
        let second = dcg(&[0.1, 0.0, 0.3]) / dcg(&[0.3, 0.1, 0.0]);
        assert!((m.ndcg - (first + second) / 2.0).abs() < 1e-9);
        // Scores all zero: no entropy to divide by zero (MindsDB's would raise).
        let zero = Relevancy::of(&[vec![0.0, 0.0]], 0.0, "kb");
        assert_eq!(
            (zero.entropy, zero.ndcg, zero.first_position),
            (0.0, 0.0, None)
        );
        assert_eq!(
            Relevancy::of(&[vec![]], 0.0, "kb").hit_at_k,
            Vec::<f64>::new()
        );
    }

    #[test]
    fn tables_are_named_as_database_dot_table() {
        assert_eq!(table_name("files.qa").unwrap(), "`files`.`qa`");
        assert!(table_name("qa").is_err());
        assert!(table_name("a..b").is_err());
    }
}
