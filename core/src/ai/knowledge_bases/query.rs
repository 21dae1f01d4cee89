//! A knowledge base query's conditions read as MindsDB 26 reads them, into the searches and
//! the plain chunk scan that answer it.
//!
//! Conditions on `content` (or `chunk_content`, which MindsDB reads as the same) search:
//! - `content = 'q'` and `content LIKE '%q%'` (the pattern's outer `%` and spaces dropped) ask
//!   the question `q`; two questions in one conjunction are asked as one, joined by " AND "
//!   (MindsDB's reading);
//! - `content IN ('a', 'b')` asks each, as `content = 'a' OR content = 'b'` would;
//! - `content != 'q'`, `content NOT LIKE 'q'` and `content NOT IN (…)` leave out of the search
//!   the chunks nearer `q` than the question asked (by vector distance; by keyword score in a
//!   keywords-only search), so they stand beside a question. MindsDB leaves out the 100
//!   chunks nearest `q` with `relevance >= 0.5`; with real embedding models almost every
//!   chunk has that relevance, so its rule drops the 100 nearest whatever they are about;
//! - `content IS NULL` finds nothing; `content IS NOT NULL` holds for every chunk.
//!
//! `OR`, `AND` and `NOT` nest freely: the conditions are spread into branches, each a
//! conjunction (at most [`MAX_BRANCHES`], and as many distinct texts asked or excluded in all,
//! counted before anything is spread, as each is embedded). A branch with a question is a search among the chunks its other
//! conditions keep; the branches without one are read together as one scan of the chunks.
//! The answer is every search's rows, then the scan's, each chunk once. The search settings
//! (`hybrid_search`, `hybrid_search_alpha`, `reranking`) are conditions of the whole query.

use std::collections::HashSet;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::utils::disjunction;
use datafusion::logical_expr::{Expr, Operator};

use super::content::{ContentCondition, ContentOp};
use super::search::MAX_QUESTIONS as MAX_BRANCHES;
use super::search::{
    Search, CHUNK_CONTENT, CONTENT, HYBRID_SEARCH, HYBRID_SEARCH_ALPHA, RERANKING,
};
use crate::error::{Error, Result};

/// The weight `hybrid_search = true` gives the vector side, as MindsDB's.
const DEFAULT_ALPHA: f64 = 0.5;

/// One search of a query: its question, what it leaves out and its conditions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Searched {
    pub(crate) search: Search,
    /// Questions whose relevant chunks this search leaves out.
    pub(crate) excluded: Vec<String>,
    /// Conditions selecting chunks before they are ranked.
    pub(crate) rows: Vec<Expr>,
    /// Conditions on `distance` or `relevance`, checked on the final scores.
    pub(crate) scores: Vec<Expr>,
}

/// What answers a query's conditions.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Answer {
    /// The searches, in the order their rows come.
    pub(crate) searches: Vec<Searched>,
    /// The condition a chunk scan keeps rows by, when some branch has no question (`None`
    /// inside: every chunk).
    pub(crate) scan: Option<Option<Expr>>,
}

impl Answer {
    /// The conditions of a query of one search and nothing else, or of none.
    pub(crate) fn is_single(&self) -> bool {
        self.searches.len() + usize::from(self.scan.is_some()) <= 1
    }
}

/// A condition as far as searching goes.
#[derive(Debug, Clone)]
enum Node {
    Ask(String),
    Exclude(String),
    /// `content IS NULL`: no chunk.
    Never,
    /// Any other condition, checked on the chunks.
    Row(Expr),
    And(Vec<Node>),
    Or(Vec<Node>),
}

/// Reads a knowledge base scan's conditions (qualifiers already dropped).
pub(crate) fn answer(kb: &str, filters: Vec<Expr>) -> Result<Answer> {
    let mut hybrid: Option<bool> = None;
    let mut alpha: Option<f64> = None;
    let mut reranking = true;
    let mut nodes = Vec::new();
    for filter in filters {
        if let Some((name, value)) = setting_of(&filter) {
            match name.as_str() {
                HYBRID_SEARCH => hybrid = Some(flag(kb, &name, &value)?),
                RERANKING => reranking = flag(kb, &name, &value)?,
                _ => alpha = Some(weight(kb, &value)?),
            }
            continue;
        }
        nodes.push(node(unmarked_elsewhere(filter)?));
    }
    // Each distinct text is asked or excluded in some branch: count them before spreading.
    let mut texts = HashSet::new();
    for node in &nodes {
        node.texts(&mut texts);
    }
    if texts.len() > MAX_BRANCHES {
        return Err(too_many_questions());
    }
    let alpha = match (hybrid, alpha) {
        (_, Some(alpha)) => alpha,
        (Some(true), None) => DEFAULT_ALPHA,
        _ => 1.0,
    };
    let mut out = Answer::default();
    let mut scanned: Vec<Vec<Expr>> = Vec::new();
    for branch in branches(Node::And(nodes))? {
        let (mut questions, mut excluded, mut rows, mut scores) = (vec![], vec![], vec![], vec![]);
        let mut never = false;
        for leaf in branch {
            match leaf {
                Node::Ask(question) if !questions.contains(&question) => questions.push(question),
                Node::Exclude(question) if !excluded.contains(&question) => excluded.push(question),
                Node::Never => never = true,
                Node::Row(expr) => {
                    let columns = expr.column_refs();
                    if columns.iter().any(|c| is_setting(&c.name)) {
                        return Err(Error::invalid(format!(
                            "Knowledge base '{kb}': {HYBRID_SEARCH}, {HYBRID_SEARCH_ALPHA} and {RERANKING} are set with `name = value` conditions joined by AND, as in WHERE content = 'question' AND {HYBRID_SEARCH} = true"
                        )));
                    }
                    match columns
                        .iter()
                        .any(|c| c.name == "distance" || c.name == "relevance")
                    {
                        true => scores.push(expr),
                        false => rows.push(expr),
                    }
                }
                _ => {}
            }
        }
        if never {
            continue;
        }
        if questions.is_empty() {
            if !excluded.is_empty() {
                return Err(Error::invalid(format!(
                    "Knowledge base '{kb}': content != '…', NOT LIKE and NOT IN leave chunks out of a search; use them beside a question (content = '…' or content LIKE '…')"
                )));
            }
            rows.extend(scores);
            scanned.push(rows);
            continue;
        }
        out.searches.push(Searched {
            search: Search {
                question: questions.join(" AND "),
                alpha,
                reranking,
            },
            excluded,
            rows,
            scores,
        });
    }
    let questions: usize = out.searches.iter().map(|s| 1 + s.excluded.len()).sum();
    if questions > MAX_BRANCHES {
        return Err(too_many_questions());
    }
    if out.searches.is_empty() && alpha < 1.0 {
        return Err(Error::invalid(format!(
            "A hybrid search of knowledge base '{kb}' needs a content = '…' condition (the question)"
        )));
    }
    if !scanned.is_empty() {
        // Each branch a conjunction; one without conditions keeps every chunk.
        out.scan = Some(match scanned.iter().any(Vec::is_empty) {
            true => None,
            false => disjunction(
                scanned
                    .into_iter()
                    .filter_map(datafusion::logical_expr::utils::conjunction),
            ),
        });
    }
    Ok(out)
}

fn too_many_questions() -> Error {
    Error::invalid(format!(
        "A knowledge base query asks more than {MAX_BRANCHES} questions (searches and exclusions), each embedded; ask fewer"
    ))
}

/// `expr` with the marked conditions (see `content`) on columns other than the content put
/// back as the comparisons they are: a projection may have named another column `content`.
fn unmarked_elsewhere(expr: Expr) -> Result<Expr> {
    Ok(expr
        .transform_up(|e| match ContentCondition::of(&e) {
            Some((condition, column)) if !content_column(column) => {
                Ok(Transformed::yes(condition.comparison(column.clone())))
            }
            _ => Ok(Transformed::no(e)),
        })?
        .data)
}

impl Node {
    /// The texts asked or excluded in it.
    fn texts<'a>(&'a self, out: &mut HashSet<&'a str>) {
        match self {
            Node::Ask(text) | Node::Exclude(text) => {
                out.insert(text);
            }
            Node::And(nodes) | Node::Or(nodes) => nodes.iter().for_each(|n| n.texts(out)),
            Node::Never | Node::Row(_) => {}
        }
    }
}

/// The branches of `node` spread out: each a conjunction of leaves, at most [`MAX_BRANCHES`].
/// Linear in the leaves but for the product of alternatives, which the cap bounds.
fn branches(node: Node) -> Result<Vec<Vec<Node>>> {
    let too_many = || {
        Error::invalid(format!(
            "A knowledge base query's conditions spread into more than {MAX_BRANCHES} searches; ask fewer questions joined by OR or IN"
        ))
    };
    Ok(match node {
        Node::And(nodes) => {
            let mut out: Vec<Vec<Node>> = vec![Vec::new()];
            for node in nodes {
                let mut alternatives = branches(node)?;
                // One alternative: its leaves join every branch, moved where there is one.
                if out.len() == 1 && out[0].is_empty() {
                    out = alternatives;
                    continue;
                }
                if alternatives.len() == 1 {
                    let only = alternatives.pop().unwrap_or_default();
                    match out.len() {
                        1 => out[0].extend(only),
                        _ => out.iter_mut().for_each(|b| b.extend(only.iter().cloned())),
                    }
                    continue;
                }
                if out.len().saturating_mul(alternatives.len()) > MAX_BRANCHES {
                    return Err(too_many());
                }
                out = out
                    .iter()
                    .flat_map(|prefix| {
                        alternatives.iter().map(move |alternative| {
                            let mut branch = prefix.clone();
                            branch.extend(alternative.iter().cloned());
                            branch
                        })
                    })
                    .collect();
            }
            out
        }
        Node::Or(nodes) => {
            let mut out = Vec::new();
            for node in nodes {
                out.extend(branches(node)?);
                if out.len() > MAX_BRANCHES {
                    return Err(too_many());
                }
            }
            out
        }
        leaf => vec![vec![leaf]],
    })
}

/// `expr` as far as searching goes: conditions that do not name the content are kept whole.
fn node(expr: Expr) -> Node {
    if !expr.column_refs().iter().any(|c| is_content(&c.name)) {
        return Node::Row(expr);
    }
    match expr {
        Expr::BinaryExpr(binary) if binary.op == Operator::And => {
            Node::And(vec![node(*binary.left), node(*binary.right)])
        }
        Expr::BinaryExpr(binary) if binary.op == Operator::Or => {
            Node::Or(vec![node(*binary.left), node(*binary.right)])
        }
        // NOT over AND / OR: De Morgan's, so the conditions beneath are read.
        Expr::Not(inner) => match *inner {
            Expr::BinaryExpr(binary) if binary.op == Operator::And => Node::Or(vec![
                node(Expr::Not(binary.left)),
                node(Expr::Not(binary.right)),
            ]),
            Expr::BinaryExpr(binary) if binary.op == Operator::Or => Node::And(vec![
                node(Expr::Not(binary.left)),
                node(Expr::Not(binary.right)),
            ]),
            Expr::Not(inner) => node(*inner),
            inner => negated_node(inner),
        },
        Expr::IsNull(inner) if content_column(&inner) => Node::Never,
        Expr::IsNotNull(inner) if content_column(&inner) => Node::And(Vec::new()),
        other => content_node(&other).unwrap_or(Node::Row(other)),
    }
}

/// `NOT expr` as far as searching goes.
fn negated_node(expr: Expr) -> Node {
    match expr {
        Expr::IsNull(inner) if content_column(&inner) => return Node::And(Vec::new()),
        Expr::IsNotNull(inner) if content_column(&inner) => return Node::Never,
        _ => {}
    }
    match content_node(&expr) {
        Some(Node::Ask(question)) => Node::Exclude(question),
        Some(Node::Exclude(question)) => Node::Ask(question),
        Some(Node::Or(asked)) => Node::And(asked.into_iter().map(negated).collect()),
        Some(Node::And(excluded)) => Node::Or(excluded.into_iter().map(negated).collect()),
        _ => Node::Row(Expr::Not(Box::new(expr))),
    }
}

fn negated(node: Node) -> Node {
    match node {
        Node::Ask(question) => Node::Exclude(question),
        Node::Exclude(question) => Node::Ask(question),
        other => other,
    }
}

/// A search condition on the content: `=`, `!=`, `LIKE`, `NOT LIKE`, `IN`, `NOT IN` with
/// text, as written or as `content` marked it.
fn content_node(expr: &Expr) -> Option<Node> {
    // Marked on a column a projection named `content`, it is a comparison of another column.
    if let Some((condition, _)) = ContentCondition::of(expr).filter(|(_, c)| content_column(c)) {
        let pattern = || {
            condition
                .value
                .trim_matches(|c: char| c == '%' || c == ' ')
                .to_string()
        };
        return Some(match condition.op {
            ContentOp::Eq => Node::Ask(condition.value.clone()),
            ContentOp::NotEq => Node::Exclude(condition.value.clone()),
            ContentOp::Like => Node::Ask(pattern()),
            ContentOp::NotLike => Node::Exclude(pattern()),
        });
    }
    match expr {
        Expr::BinaryExpr(binary) if matches!(binary.op, Operator::Eq | Operator::NotEq) => {
            let question = match (binary.left.as_ref(), binary.right.as_ref()) {
                (column, value) | (value, column) if content_column(column) => text(value)?,
                _ => return None,
            };
            Some(match binary.op {
                Operator::Eq => Node::Ask(question),
                _ => Node::Exclude(question),
            })
        }
        Expr::Like(like) if like.escape_char.is_none() && content_column(&like.expr) => {
            // MindsDB's reading: the pattern, its outer wildcards dropped, is the question.
            let question = text(&like.pattern)?
                .trim_matches(|c: char| c == '%' || c == ' ')
                .to_string();
            Some(match like.negated {
                false => Node::Ask(question),
                true => Node::Exclude(question),
            })
        }
        Expr::InList(list) if content_column(&list.expr) => {
            let questions = list.list.iter().map(text).collect::<Option<Vec<_>>>()?;
            Some(match list.negated {
                false => Node::Or(questions.into_iter().map(Node::Ask).collect()),
                true => Node::And(questions.into_iter().map(Node::Exclude).collect()),
            })
        }
        _ => None,
    }
}

fn is_content(name: &str) -> bool {
    name == CONTENT || name == CHUNK_CONTENT
}

/// Whether `expr` is the content column (casts looked through).
fn content_column(expr: &Expr) -> bool {
    match expr {
        Expr::Column(c) => is_content(&c.name),
        Expr::Cast(cast) => content_column(&cast.expr),
        _ => false,
    }
}

/// A text literal's value (casts looked through).
fn text(expr: &Expr) -> Option<String> {
    match literal(expr)? {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s),
        _ => None,
    }
}

fn literal(expr: &Expr) -> Option<ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value.clone()),
        Expr::Cast(cast) => literal(&cast.expr),
        _ => None,
    }
}

fn is_setting(name: &str) -> bool {
    matches!(name, HYBRID_SEARCH | HYBRID_SEARCH_ALPHA | RERANKING)
}

/// A search setting's `name = value`, or a bare `name` / `NOT name` (what the planner makes
/// of `name = true` / `name = false`).
fn setting_of(expr: &Expr) -> Option<(String, ScalarValue)> {
    let bare = |e: &Expr, value: bool| match e {
        Expr::Column(c) if is_setting(&c.name) => {
            Some((c.name.clone(), ScalarValue::Boolean(Some(value))))
        }
        _ => None,
    };
    match expr {
        Expr::Column(_) => return bare(expr, true),
        Expr::Not(inner) => return bare(inner, false),
        _ => {}
    }
    let Expr::BinaryExpr(binary) = expr else {
        return None;
    };
    if binary.op != Operator::Eq {
        return None;
    }
    match (binary.left.as_ref(), binary.right.as_ref()) {
        (Expr::Column(c), other) | (other, Expr::Column(c)) if is_setting(&c.name) => {
            Some((c.name.clone(), literal(other)?))
        }
        _ => None,
    }
}

fn flag(kb: &str, name: &str, value: &ScalarValue) -> Result<bool> {
    match value {
        ScalarValue::Boolean(Some(b)) => Ok(*b),
        ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s))
            if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") =>
        {
            Ok(s.eq_ignore_ascii_case("true"))
        }
        ScalarValue::Int64(Some(n @ (0 | 1))) => Ok(*n == 1),
        other => Err(Error::invalid(format!(
            "Knowledge base '{kb}': {name} must be true or false, not {other}"
        ))),
    }
}

fn weight(kb: &str, value: &ScalarValue) -> Result<f64> {
    let number = value
        .cast_to(&DataType::Float64)
        .ok()
        .and_then(|v| match v {
            ScalarValue::Float64(Some(n)) => Some(n),
            _ => None,
        })
        .filter(|n| (0.0..=1.0).contains(n));
    number.ok_or_else(|| {
        Error::invalid(format!(
            "Knowledge base '{kb}': {HYBRID_SEARCH_ALPHA} must be a number between 0 and 1, not {value}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};
    use datafusion::prelude::in_list;

    fn questions(given: &Answer) -> Vec<(&str, Vec<&str>)> {
        given
            .searches
            .iter()
            .map(|s| {
                (
                    s.search.question.as_str(),
                    s.excluded.iter().map(String::as_str).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn like_asks_its_pattern_and_not_like_excludes() {
        let found = answer(
            "kb",
            vec![
                col("content").like(lit("%historical era% ")),
                col("content").not_like(lit("war battle")),
                col("content").not_eq(lit("fight")),
                col("rating").gt(lit(3.5)),
            ],
        )
        .unwrap();
        assert_eq!(
            questions(&found),
            [("historical era", vec!["war battle", "fight"])]
        );
        assert_eq!(found.searches[0].rows, [col("rating").gt(lit(3.5))]);
        assert!(found.scan.is_none() && found.is_single());
    }

    #[test]
    fn or_and_in_spread_into_searches_each_with_its_own_conditions() {
        let first = col("content")
            .like(lit("detective"))
            .and(col("genre").eq(lit("Mystery")));
        let second = col("content")
            .eq(lit("romance"))
            .and(col("genre").eq(lit("Romance")));
        let found = answer("kb", vec![first.or(second), col("rating").gt(lit(7))]).unwrap();
        assert_eq!(
            questions(&found),
            [("detective", vec![]), ("romance", vec![])]
        );
        assert_eq!(
            found.searches[1].rows,
            [col("genre").eq(lit("Romance")), col("rating").gt(lit(7))]
        );
        let listed = answer(
            "kb",
            vec![in_list(
                col("chunk_content"),
                vec![lit("a"), lit("b")],
                false,
            )],
        )
        .unwrap();
        assert_eq!(questions(&listed), [("a", vec![]), ("b", vec![])]);
    }

    #[test]
    fn questions_of_one_conjunction_are_asked_together() {
        let found = answer(
            "kb",
            vec![col("content").eq(lit("a")), col("content").like(lit("b"))],
        )
        .unwrap();
        assert_eq!(questions(&found), [("a AND b", vec![])]);
    }

    #[test]
    fn branches_without_a_question_scan_together() {
        let found = answer(
            "kb",
            vec![col("content")
                .eq(lit("a"))
                .or(col("year").gt(lit(2000)))
                .or(col("year").lt(lit(1900)))],
        )
        .unwrap();
        assert_eq!(questions(&found), [("a", vec![])]);
        assert_eq!(
            found.scan,
            Some(Some(
                col("year").gt(lit(2000)).or(col("year").lt(lit(1900)))
            ))
        );
        assert!(!found.is_single());
        // A condition without the content is never taken apart.
        let plain = answer("kb", vec![col("a").eq(lit(1)).or(col("b").eq(lit(2)))]).unwrap();
        assert!(plain.searches.is_empty());
        assert_eq!(
            plain.scan,
            Some(Some(col("a").eq(lit(1)).or(col("b").eq(lit(2)))))
        );
    }

    #[test]
    fn null_tests_on_the_content_find_nothing_or_everything() {
        let none = answer("kb", vec![col("content").is_null()]).unwrap();
        assert_eq!(none, Answer::default());
        let all = answer("kb", vec![col("content").is_not_null()]).unwrap();
        assert_eq!(all.scan, Some(None));
    }

    #[test]
    fn exclusions_alone_and_too_many_branches_are_refused() {
        let alone = answer("kb", vec![col("content").not_like(lit("war"))]).unwrap_err();
        assert!(alone.message().contains("beside a question"), "{alone}");
        let many: Vec<Expr> = (0..5)
            .map(|i| {
                col("content")
                    .eq(lit(format!("a{i}")))
                    .or(col("content").eq(lit(format!("b{i}"))))
            })
            .collect();
        let spread = answer("kb", many).unwrap_err();
        assert!(spread.message().contains("more than 16"), "{spread}");
        // NOT IN is a conjunction of exclusions, NOT (IN) too.
        let not_in = answer(
            "kb",
            vec![
                col("content").eq(lit("q")),
                Expr::Not(Box::new(in_list(
                    col("content"),
                    vec![lit("x"), lit("y")],
                    false,
                ))),
            ],
        )
        .unwrap();
        assert_eq!(questions(&not_in), [("q", vec!["x", "y"])]);
    }
}
