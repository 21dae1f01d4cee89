//! The job statements, read on tokens: `CREATE JOB [IF NOT EXISTS] [p.]j [AS] (stmt; …)
//! [START 'date'] [END 'date'] [EVERY [n] period] [IF (stmt; …)]` and `DROP JOB [IF EXISTS]
//! [p.]j`. (`SHOW JOBS` reads `information_schema.jobs`; see `sql::parse`.)

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;

use crate::catalog::jobs::{self, Every, NewJob};
use crate::error::{Error, Result};
use crate::sql::parse::words::{
    closing_paren, end_at, if_exists_at, keyword, qualified_name, tokens_text, word,
};
use crate::sql::{FeatureStatement, Outcome, ResultContext, SqlRunner};
use crate::tenant::TenantId;

/// A job statement.
#[derive(Debug, PartialEq)]
pub(crate) enum JobStatement {
    /// `CREATE JOB`.
    Create {
        project: Option<String>,
        name: String,
        if_not_exists: bool,
        query: String,
        if_query: Option<String>,
        start: Option<String>,
        end: Option<String>,
        every: Option<Every>,
    },
    /// `DROP JOB`.
    Drop {
        project: Option<String>,
        name: String,
        if_exists: bool,
    },
}

impl FeatureStatement for JobStatement {
    fn run<'a>(
        self: Box<Self>,
        runner: &'a SqlRunner,
        tenant: TenantId,
        context: &'a mut ResultContext,
    ) -> BoxFuture<'a, Result<Outcome>> {
        let current = context.db.clone();
        Box::pin(async move {
            match *self {
                JobStatement::Create {
                    project,
                    name,
                    if_not_exists,
                    query,
                    if_query,
                    start,
                    end,
                    every,
                } => {
                    // Each statement must read now, not at its first run.
                    for text in std::iter::once(&query).chain(if_query.as_ref()) {
                        runner.parse_text(tenant, text)?;
                    }
                    let new = NewJob {
                        name,
                        project: project.unwrap_or(current),
                        query,
                        if_query,
                        start_at: start.as_deref().map(jobs::parse_date).transpose()?,
                        end_at: end.as_deref().map(jobs::parse_date).transpose()?,
                        every,
                    };
                    let now = crate::time::now_unix();
                    let limits = jobs::limits(&runner.services.config);
                    runner
                        .services
                        .store
                        .write(move |txn| {
                            jobs::create(txn, tenant, new, if_not_exists, now, limits)
                        })
                        .await?;
                }
                JobStatement::Drop {
                    project,
                    name,
                    if_exists,
                } => {
                    let project = project.unwrap_or(current);
                    runner
                        .services
                        .store
                        .write(move |txn| jobs::drop_job(txn, tenant, &project, &name, if_exists))
                        .await?;
                }
            }
            Ok(Outcome::Ok {
                affected_rows: None,
            })
        })
    }
}

/// Recognises a job statement; `None` when `words` is something else.
pub(crate) fn job_command(words: &[&Token]) -> Result<Option<JobStatement>> {
    let is = |k: usize, text: &str| matches!(words.get(k), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text));
    match keyword(words[0]) {
        Some(Keyword::CREATE) if is(1, "JOB") => create(words).map(Some),
        Some(Keyword::DROP) if is(1, "JOB") => {
            let (if_exists, k) = if_exists_at(words, 2, false);
            let (project, name, k) = job_name(words, k)?;
            end_at(words, k)?;
            Ok(Some(JobStatement::Drop {
                project,
                name,
                if_exists,
            }))
        }
        _ => Ok(None),
    }
}

/// `[project.]name` at `k`; returns the index after it.
fn job_name(words: &[&Token], k: usize) -> Result<(Option<String>, String, usize)> {
    qualified_name(words, k, "a job name")
}

fn create(words: &[&Token]) -> Result<JobStatement> {
    let (if_not_exists, k) = if_exists_at(words, 2, true);
    let (project, name, mut k) = job_name(words, k)?;
    if keyword_at(words, k) == Some(Keyword::AS) {
        k += 1;
    }
    let (query, mut k) = statements_at(words, k, "the job's statements")?;
    let (mut start, mut end, mut every, mut if_query) = (None, None, None, None);
    while k < words.len() {
        let clause = words[k];
        let text_at = |i: usize, what: &str| match words.get(i) {
            Some(Token::SingleQuotedString(text)) => Ok(text.clone()),
            _ => Err(Error::invalid(format!(
                "Expected a date in quotes after {what}"
            ))),
        };
        match keyword(clause) {
            Some(Keyword::START) if start.is_none() => {
                start = Some(text_at(k + 1, "START")?);
                k += 2;
            }
            Some(Keyword::END) if end.is_none() => {
                end = Some(text_at(k + 1, "END")?);
                k += 2;
            }
            Some(Keyword::IF) if if_query.is_none() => {
                let (text, next) = statements_at(words, k + 1, "IF")?;
                if_query = Some(text);
                k = next;
            }
            _ if every.is_none() && matches!(clause, Token::Word(w) if w.value.eq_ignore_ascii_case("EVERY")) => {
                let (count, unit_at) = match words.get(k + 1) {
                    Some(Token::Number(n, _)) => {
                        let count = n.parse::<u64>().map_err(|_| {
                            Error::invalid(format!("EVERY takes a whole number; got {n}"))
                        })?;
                        (Some(count), k + 2)
                    }
                    _ => (None, k + 1),
                };
                let unit = word(words, unit_at, "a period after EVERY (minute, hour, day, …)")?;
                every = Some(Every::parse(count, &unit)?);
                k = unit_at + 1;
            }
            _ => {
                return Err(Error::invalid(format!(
                    "Unexpected '{clause}' in CREATE JOB; after the statements come [START 'date'] [END 'date'] [EVERY [n] period] [IF (statements)]"
                )))
            }
        }
    }
    Ok(JobStatement::Create {
        project,
        name,
        if_not_exists,
        query,
        if_query,
        start,
        end,
        every,
    })
}

/// The statements in the parenthesis at `k`, as text separated by `; `; returns the index
/// after the closing parenthesis.
fn statements_at(words: &[&Token], k: usize, what: &str) -> Result<(String, usize)> {
    if words.get(k) != Some(&&Token::LParen) {
        return Err(Error::invalid(format!(
            "Expected ( statement; … ) for {what}"
        )));
    }
    let close = closing_paren(words, k)
        .map_err(|_| Error::invalid(format!("The parenthesis of {what} is never closed")))?;
    let body = &words[k + 1..close];
    let mut statements = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, token) in body.iter().enumerate() {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::SemiColon if depth == 0 => {
                statements.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    statements.push(&body[start..]);
    let texts: Vec<String> = statements
        .into_iter()
        .filter(|s| !s.is_empty())
        .map(tokens_text)
        .collect();
    if texts.is_empty() {
        return Err(Error::invalid(format!("{what} has no statement")));
    }
    Ok((texts.join("; "), close + 1))
}

/// The statements of stored job text (`stmt; stmt`), each as text.
pub(crate) fn split(text: &str) -> Result<Vec<String>> {
    let words = crate::sql::parse::words_of(text)?;
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current: Vec<&Token> = Vec::new();
    for token in &words {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        if *token == Token::SemiColon && depth == 0 {
            if !current.is_empty() {
                out.push(tokens_text(&current));
            }
            current.clear();
        } else {
            current.push(token);
        }
    }
    if !current.is_empty() {
        out.push(tokens_text(&current));
    }
    Ok(out)
}

fn keyword_at(words: &[&Token], k: usize) -> Option<Keyword> {
    words.get(k).and_then(|t| keyword(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::MySqlDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn read(sql: &str) -> Result<Option<JobStatement>> {
        let tokens = Tokenizer::new(&MySqlDialect {}, sql).tokenize().unwrap();
        let words: Vec<&Token> = tokens
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect();
        job_command(&words)
    }

    #[test]
    fn create_job_reads_mindsdbs_clauses() {
        let job = read(
            "CREATE JOB IF NOT EXISTS p.j (INSERT INTO t SELECT * FROM s WHERE id > LAST; RETRAIN m) \
             START '2030-01-02' END '2030-02-01 10:00:00' EVERY 2 hours IF (SELECT 1 FROM s)",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            job,
            JobStatement::Create {
                project: Some("p".into()),
                name: "j".into(),
                if_not_exists: true,
                query: "INSERT INTO t SELECT * FROM s WHERE id > LAST; RETRAIN m".into(),
                if_query: Some("SELECT 1 FROM s".into()),
                start: Some("2030-01-02".into()),
                end: Some("2030-02-01 10:00:00".into()),
                every: Some(Every::parse(Some(2), "hours").unwrap()),
            }
        );
        let once = read("create job j as (select 1)").unwrap().unwrap();
        assert!(matches!(once, JobStatement::Create { every: None, .. }));
        for (bad, says) in [
            ("CREATE JOB j", "Expected ("),
            ("CREATE JOB j (SELECT 1", "never closed"),
            ("CREATE JOB j (SELECT 1) EVERY", "a period"),
            ("CREATE JOB j (SELECT 1) EVERY 0 days", "1 to 100000"),
            ("CREATE JOB j (SELECT 1) START 5", "a date in quotes"),
            ("CREATE JOB j (SELECT 1) NOW", "Unexpected 'NOW'"),
            ("CREATE JOB j ()", "no statement"),
        ] {
            let error = read(bad).unwrap_err();
            assert!(error.message().contains(says), "{bad}: {error}");
        }
        assert_eq!(
            read("DROP JOB IF EXISTS p.j").unwrap(),
            Some(JobStatement::Drop {
                project: Some("p".into()),
                name: "j".into(),
                if_exists: true
            })
        );
        assert_eq!(read("DROP TABLE j").unwrap(), None);
    }
}
