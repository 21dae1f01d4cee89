//! `mindlite-server users …`: the hosted edition's user administration from the command line,
//! on the database file the server uses (while the server is stopped: the file has one
//! owner at a time). Each command prints its result as one JSON document on stdout.

use mindlite::Engine;

/// The usage text of the `users` subcommand.
pub const USAGE: &str = "\
Usage: mindlite-server users COMMAND [--config FILE] [--data PATH]

Commands:
  create NAME [--plan PLAN]   add a user (a tenant) on PLAN, or on hosted.default_plan
  list                        every user, with its plan and key ids
  show NAME                   one user
  plan NAME PLAN              move a user to another plan
  disable NAME | enable NAME  refuse (or accept again) a user's keys and tokens
  key NAME                    issue an API key; it is shown this once
  revoke NAME KEY_ID          revoke one of a user's API keys";

/// One `users` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `create NAME [--plan PLAN]`
    Create(String, Option<String>),
    /// `list`
    List,
    /// `show NAME`
    Show(String),
    /// `plan NAME PLAN`
    Plan(String, String),
    /// `disable NAME` / `enable NAME`
    Disable(String, bool),
    /// `key NAME`
    Key(String),
    /// `revoke NAME KEY_ID`
    Revoke(String, u64),
}

impl Command {
    /// Reads the words after `users` (options already taken out; `plan` is `--plan`'s value).
    pub fn parse(words: &[String], plan: Option<String>) -> Result<Command, String> {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let command = match words.as_slice() {
            ["create", name] => return Ok(Command::Create(name.to_string(), plan)),
            ["list"] => Command::List,
            ["show", name] => Command::Show(name.to_string()),
            ["plan", name, plan] => Command::Plan(name.to_string(), plan.to_string()),
            ["disable", name] => Command::Disable(name.to_string(), true),
            ["enable", name] => Command::Disable(name.to_string(), false),
            ["key", name] => Command::Key(name.to_string()),
            ["revoke", name, id] => {
                let id = id
                    .parse()
                    .map_err(|_| format!("KEY_ID must be a number, got '{id}'"))?;
                Command::Revoke(name.to_string(), id)
            }
            [] => return Err("users needs a command".to_string()),
            [first, ..] => return Err(format!("unknown or incomplete users command '{first}'")),
        };
        if plan.is_some() {
            return Err("--plan goes with 'users create' only".to_string());
        }
        Ok(command)
    }

    /// Runs the command and returns the JSON to print.
    pub async fn run(self, engine: &Engine) -> mindlite::Result<String> {
        let json = match self {
            Command::Create(name, plan) => {
                to_json(&engine.create_user(&name, plan.as_deref()).await?)
            }
            Command::List => to_json(&engine.list_users()?),
            Command::Show(name) => to_json(&engine.get_user(&name)?),
            Command::Plan(name, plan) => {
                to_json(&engine.update_user(&name, Some(&plan), None).await?)
            }
            Command::Disable(name, disabled) => {
                to_json(&engine.update_user(&name, None, Some(disabled)).await?)
            }
            Command::Key(name) => to_json(&engine.create_api_key(&name).await?),
            Command::Revoke(name, id) => to_json(&engine.revoke_api_key(&name, id).await?),
        };
        Ok(json)
    }
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
