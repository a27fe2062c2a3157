//! The `cron` tool: one tool with an `action` (nanobot's CronTool), mapped
//! to `schedule.add-job` / `list-jobs` / `remove-job`. The host checks the
//! schedule, the limits and whose job it is; this only checks that the
//! arguments of each action make sense and words the answers.

use serde::Deserialize;

/// The tool's arguments.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
pub struct CronArgs {
    pub action: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub every_seconds: Option<u32>,
    #[serde(default)]
    pub cron_expr: Option<String>,
    #[serde(default)]
    pub tz: Option<String>,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub job_id: Option<String>,
}

/// What to ask the host.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Add { name: String, message: String, when: When },
    List,
    Remove { id: String },
}

/// When an added job fires.
#[derive(Debug, PartialEq, Eq)]
pub enum When {
    Every(u32),
    Cron { expr: String, tz: Option<String> },
    At { time: String, tz: Option<String> },
}

/// A job as the host describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobText {
    pub id: String,
    pub name: String,
    pub message: String,
    pub schedule: String,
    pub next_run: Option<String>,
}

impl CronArgs {
    /// The request for these arguments; the error is for the model.
    pub fn request(args_json: &str) -> Result<Request, String> {
        let args: CronArgs = serde_json::from_str(args_json).map_err(|e| format!("invalid arguments for cron: {e}"))?;
        match args.action.as_str() {
            "add" => {
                let message = args.message.filter(|m| !m.trim().is_empty()).ok_or("action `add` needs `message`: what to do when the job fires")?;
                let when = match (args.every_seconds, args.cron_expr, args.at) {
                    (Some(secs), None, None) => When::Every(secs),
                    (None, Some(expr), None) => When::Cron { expr, tz: args.tz },
                    (None, None, Some(time)) => When::At { time, tz: args.tz },
                    (None, None, None) => return Err("action `add` needs one of `every_seconds`, `cron_expr` or `at`".into()),
                    _ => return Err("give only one of `every_seconds`, `cron_expr` and `at`".into()),
                };
                Ok(Request::Add { name: args.name.unwrap_or_default(), message, when })
            }
            "list" => Ok(Request::List),
            "remove" => Ok(Request::Remove { id: args.job_id.filter(|i| !i.is_empty()).ok_or("action `remove` needs `job_id` (see action `list`)")? }),
            other => Err(format!("unknown action `{other}`: use add, list or remove")),
        }
    }
}

fn line(job: &JobText) -> String {
    let next = job.next_run.as_deref().map_or_else(|| "no further runs".to_string(), |t| format!("next run {t}"));
    format!("- {} \"{}\": {}; {next}; message: {}", job.id, job.name, job.schedule, job.message)
}

/// The answer to `add`.
pub fn added(job: &JobText) -> String {
    format!("Scheduled job {} \"{}\" ({}); next run {}. Its message will arrive in this conversation.", job.id, job.name, job.schedule, job.next_run.as_deref().unwrap_or("never"))
}

/// The answer to `list`.
pub fn listed(jobs: &[JobText]) -> String {
    if jobs.is_empty() {
        return "No scheduled jobs in this conversation.".into();
    }
    let mut out = format!("{} scheduled job(s):", jobs.len());
    for job in jobs {
        out.push('\n');
        out.push_str(&line(job));
    }
    out
}

/// The answer to `remove`.
pub fn removed(job: &JobText) -> String {
    format!("Removed job {} \"{}\" ({}).", job.id, job.name, job.schedule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_needs_its_arguments() {
        assert_eq!(
            CronArgs::request(r#"{"action":"add","message":"stand up","every_seconds":3600}"#).unwrap(),
            Request::Add { name: String::new(), message: "stand up".into(), when: When::Every(3600) }
        );
        assert_eq!(
            CronArgs::request(r#"{"action":"add","name":"m","message":"x","cron_expr":"0 9 * * *","tz":"Europe/Berlin"}"#).unwrap(),
            Request::Add { name: "m".into(), message: "x".into(), when: When::Cron { expr: "0 9 * * *".into(), tz: Some("Europe/Berlin".into()) } }
        );
        assert!(CronArgs::request(r#"{"action":"add","message":"x"}"#).unwrap_err().contains("one of"));
        assert!(CronArgs::request(r#"{"action":"add","message":"x","every_seconds":60,"at":"2030-01-01T00:00"}"#).unwrap_err().contains("only one"));
        assert!(CronArgs::request(r#"{"action":"add","every_seconds":60}"#).unwrap_err().contains("needs `message`"));
        assert_eq!(CronArgs::request(r#"{"action":"list"}"#).unwrap(), Request::List);
        assert!(CronArgs::request(r#"{"action":"remove"}"#).unwrap_err().contains("job_id"));
        assert!(CronArgs::request(r#"{"action":"pause"}"#).unwrap_err().contains("unknown action"));
    }

    #[test]
    fn answers_list_the_jobs() {
        let job = JobText { id: "ab12".into(), name: "tea".into(), message: "make tea".into(), schedule: "every 1 h".into(), next_run: Some("2030-01-01T10:00:00+00:00".into()) };
        assert!(added(&job).starts_with("Scheduled job ab12 \"tea\" (every 1 h); next run 2030-01-01T10:00:00+00:00"));
        assert_eq!(listed(&[]), "No scheduled jobs in this conversation.");
        assert!(listed(std::slice::from_ref(&job)).contains("- ab12 \"tea\": every 1 h; next run 2030"));
        assert_eq!(removed(&job), "Removed job ab12 \"tea\" (every 1 h).");
    }
}
