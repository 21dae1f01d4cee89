//! The integrations this build has, as MindsDB lists its handlers (`GET /api/handlers`,
//! `information_schema.handlers`, `SHOW HANDLERS`): the datasource engines (`postgres`,
//! `mysql`, `mariadb`, `files`) and the model engines (`builtin`, `lightwood`, `openai`), each with the arguments
//! it takes. Every one is compiled in, so each imports: there is no handler to install.

use serde_json::{json, Map, Value};

use crate::catalog::models;
use crate::services::connectors::{directory, mysql, postgres};

/// One integration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Handler {
    /// The name an `ENGINE = '…'` (datasource) or `engine = '…'` / `FROM …` (model, ML
    /// engine) gives.
    pub(crate) name: &'static str,
    /// `data` or `ml`, as MindsDB types handlers.
    pub(crate) kind: &'static str,
    /// A title for people.
    pub(crate) title: &'static str,
    /// What it does.
    pub(crate) description: &'static str,
    /// The arguments it takes: (name, type, required, secret, description).
    pub(crate) arguments: &'static [Argument],
}

/// One argument of a handler: (name, type, required, secret, description).
pub(crate) type Argument = (&'static str, &'static str, bool, bool, &'static str);

impl Handler {
    /// Its arguments in MindsDB's `connection_args` shape: name → `{"type", "required",
    /// "description", "label", "secret"}`.
    pub(crate) fn connection_args(&self) -> Map<String, Value> {
        self.arguments
            .iter()
            .map(|(name, kind, required, secret, description)| {
                let argument = json!({
                    "type": kind,
                    "required": required,
                    "description": description,
                    "label": label(name),
                    "secret": secret,
                });
                (name.to_string(), argument)
            })
            .collect()
    }

    /// MindsDB's record of it (`GET /api/handlers/{name}`).
    pub(crate) fn to_wire_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "title": self.title,
            "description": self.description,
            "version": env!("CARGO_PKG_VERSION"),
            "connection_args": self.connection_args(),
            "import": {"success": true, "error_message": null, "folder": self.name, "dependencies": []},
            "support_level": "mindlite",
            "permanent": self.name == directory::ENGINE,
        })
    }
}

/// "api_key" → "Api key".
fn label(name: &str) -> String {
    let spaced = name.replace('_', " ");
    let mut chars = spaced.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

const POSTGRES_ARGUMENTS: &[Argument] = &[
    (
        "host",
        "str",
        true,
        false,
        "The host name or IP address of the PostgreSQL server, or a Unix socket directory.",
    ),
    (
        "port",
        "int",
        false,
        false,
        "The TCP port of the server (5432 when not given).",
    ),
    (
        "database",
        "str",
        true,
        false,
        "The database to connect to.",
    ),
    ("user", "str", true, false, "The user to connect as."),
    ("password", "pwd", false, true, "The user's password."),
    (
        "schema",
        "str",
        false,
        false,
        "The schema whose tables are read (public when not given).",
    ),
    (
        "connect_timeout",
        "int",
        false,
        false,
        "Seconds a connection attempt may take.",
    ),
    (
        "push_down",
        "bool",
        false,
        false,
        "Whether filters, projections and limits are sent to the server (true when not given).",
    ),
];

const MYSQL_ARGUMENTS: &[Argument] = &[
    (
        "url",
        "str",
        false,
        false,
        "mysql://user:password@host:port/database, instead of (or under) the arguments below.",
    ),
    (
        "host",
        "str",
        true,
        false,
        "The host name or IP address of the server.",
    ),
    (
        "port",
        "int",
        false,
        false,
        "The TCP port of the server (3306 when not given).",
    ),
    (
        "database",
        "str",
        true,
        false,
        "The database whose tables are read.",
    ),
    ("user", "str", true, false, "The user to connect as."),
    ("password", "pwd", false, true, "The user's password."),
    (
        "connect_timeout",
        "int",
        false,
        false,
        "Seconds a connection attempt may take.",
    ),
    (
        "push_down",
        "bool",
        false,
        false,
        "Whether filters, projections and limits are sent to the server (true when not given).",
    ),
];

const FILES_ARGUMENTS: &[Argument] = &[(
    "path",
    "str",
    true,
    false,
    "A directory of the server whose CSV and Parquet files are read as tables.",
)];

const BUILTIN_ARGUMENTS: &[Argument] = &[];

const OPENAI_ARGUMENTS: &[Argument] = &[
    (
        "api_key",
        "pwd",
        false,
        true,
        "The API key (the server's llm.api_key when not given).",
    ),
    (
        "base_url",
        "str",
        false,
        false,
        "An OpenAI-compatible endpoint (the server's llm.base_url when not given).",
    ),
    ("model_name", "str", false, false, "The model to ask."),
];

/// Every integration of this build, by kind then name.
pub(crate) fn all() -> Vec<Handler> {
    vec![
        Handler {
            name: directory::ENGINE,
            kind: "data",
            title: "Files",
            description: "CSV and Parquet files of a local directory, read as tables",
            arguments: FILES_ARGUMENTS,
        },
        Handler {
            name: postgres::ENGINE,
            kind: "data",
            title: "PostgreSQL",
            description: "A PostgreSQL database, read and written",
            arguments: POSTGRES_ARGUMENTS,
        },
        Handler {
            name: mysql::ENGINE,
            kind: "data",
            title: "MySQL",
            description: "A MySQL database, read and written",
            arguments: MYSQL_ARGUMENTS,
        },
        Handler {
            name: mysql::MARIADB,
            kind: "data",
            title: "MariaDB",
            description: "A MariaDB database, read and written",
            arguments: MYSQL_ARGUMENTS,
        },
        Handler {
            name: models::BUILTIN_ENGINES[0],
            kind: "ml",
            title: "Built-in AutoML",
            description: "Trains regression and classification models from rows",
            arguments: BUILTIN_ARGUMENTS,
        },
        Handler {
            name: models::BUILTIN_ENGINES[1],
            kind: "ml",
            title: "Lightwood (built-in)",
            description: "MindsDB's name for its AutoML engine; trains with the built-in engine",
            arguments: BUILTIN_ARGUMENTS,
        },
        Handler {
            name: models::openai::ENGINE,
            kind: "ml",
            title: "OpenAI",
            description: "Answers a prompt template per row through an OpenAI-compatible endpoint",
            arguments: OPENAI_ARGUMENTS,
        },
    ]
}

/// The integration named `name` (case-insensitive).
pub(crate) fn named(name: &str) -> Option<Handler> {
    all()
        .into_iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_a_statement_takes_is_a_handler() {
        for engine in models::ENGINES {
            assert_eq!(named(engine).map(|h| h.kind), Some("ml"), "{engine}");
        }
        for engine in [
            postgres::ENGINE,
            mysql::ENGINE,
            mysql::MARIADB,
            directory::ENGINE,
        ] {
            assert_eq!(named(engine).map(|h| h.kind), Some("data"), "{engine}");
        }
        let postgres = named("POSTGRES").unwrap().connection_args();
        assert_eq!(postgres["password"]["secret"], true);
        assert_eq!(postgres["host"]["label"], "Host");
    }
}
