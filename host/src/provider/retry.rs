//! Retries of model requests (spec §9): which failures are worth another
//! attempt, how long to wait, and when to give up.
//!
//! This file owns the policy ([`RetryPolicy`]), the loop that applies it to
//! one provider call ([`RetryPolicy::run`]), and `Retry-After` parsing. What
//! counts as retryable for a given HTTP answer is decided by the provider
//! (it reads the body, e.g. to tell a quota 429 from a rate-limit 429) and
//! arrives here as [`ProviderError::retryable`](super::ProviderError::retryable).
//!
//! Rules:
//! - retry only errors marked retryable (408/409/429 without quota/5xx,
//!   timeouts, connection errors, unreadable answers);
//! - wait the policy's next delay, or the server's `Retry-After` when it sent
//!   one (capped at [`MAX_RETRY_AFTER`], so a hostile or confused server
//!   cannot park the agent for an hour);
//! - never retry once streamed text reached the user: a second attempt would
//!   show a second, different beginning of the answer;
//! - after the last attempt, give up with a message that says so.

use std::time::{Duration, SystemTime};

use super::ChatResponse;

/// The longest `Retry-After` honoured; longer values are cut to this.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often and how long to wait between attempts of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The wait before each retry; its length is the number of retries, so a
    /// request is attempted `delays.len() + 1` times at most.
    pub delays: Vec<Duration>,
}

impl Default for RetryPolicy {
    /// 1 s, 2 s, 4 s: four attempts within about seven seconds.
    fn default() -> Self {
        RetryPolicy { delays: [1, 2, 4].map(Duration::from_secs).to_vec() }
    }
}

impl RetryPolicy {
    /// No retries: one attempt.
    pub fn none() -> Self {
        RetryPolicy { delays: Vec::new() }
    }

    /// The default shape in milliseconds (1, 2, 4 ms), for tests.
    pub fn fast() -> Self {
        RetryPolicy { delays: [1, 2, 4].map(Duration::from_millis).to_vec() }
    }

    /// The most attempts one request gets.
    pub fn max_attempts(&self) -> usize {
        self.delays.len() + 1
    }

    /// The wait before retry number `retry` (0-based): the server's
    /// `Retry-After` when given (capped), else the policy's delay.
    pub fn delay(&self, retry: usize, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(wait) => wait.min(MAX_RETRY_AFTER),
            None => self.delays.get(retry).or(self.delays.last()).copied().unwrap_or_default(),
        }
    }

    /// Runs `attempt` until it succeeds, fails for good, streamed text, or
    /// the attempts are used up. Never errs: the result is the last response,
    /// its message extended when retries were exhausted.
    pub(crate) async fn run<F, Fut>(&self, mut attempt: F) -> ChatResponse
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Attempt>,
    {
        let max = self.max_attempts();
        let mut made = 0;
        loop {
            let outcome = attempt().await;
            made += 1;
            let Some(error) = outcome.response.error.as_ref().filter(|_| outcome.response.is_error()) else {
                return outcome.response;
            };
            if !error.retryable || outcome.streamed {
                return outcome.response;
            }
            if made >= max {
                return exhausted(outcome.response, made);
            }
            let wait = self.delay(made - 1, outcome.retry_after);
            tracing::warn!(
                attempt = made,
                of = max,
                status = error.status,
                wait_ms = wait.as_millis() as u64,
                "model request failed, retrying: {}",
                error.message
            );
            tokio::time::sleep(wait).await;
        }
    }
}

/// What one attempt produced, as the retry loop needs it.
#[derive(Debug)]
pub struct Attempt {
    /// The answer, or a failed response.
    pub response: ChatResponse,
    /// The server's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
    /// Whether any text reached the user's stream sink.
    pub streamed: bool,
}

impl Attempt {
    /// An attempt that streamed nothing and named no wait.
    pub fn plain(response: ChatResponse) -> Self {
        Attempt { response, retry_after: None, streamed: false }
    }
}

/// The last failure, reworded to say the provider was retried and is down.
fn exhausted(mut response: ChatResponse, attempts: usize) -> ChatResponse {
    if attempts > 1
        && let Some(error) = response.error.as_mut()
    {
        error.message = format!("the model provider is unavailable after {attempts} attempts: {}", error.message);
    }
    response
}

/// The wait a response asks for: `retry-after-ms` (sent by OpenAI and some
/// proxies) or `Retry-After`. Not capped here; [`RetryPolicy::delay`] caps.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms.min(86_400_000.0) / 1000.0));
    }
    text("retry-after").and_then(|v| parse_retry_after(v, SystemTime::now()))
}

/// Parses a `Retry-After` value: delay seconds (`"3"`, also `"1.5"`), or an
/// HTTP date (IMF-fixdate, RFC 850 or asctime) measured from `now`; a date in
/// the past means no wait. `None` for anything else.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = value.parse().ok()?;
        // Bounded before converting: a huge number must not panic in
        // `from_secs_f64`; the policy caps the wait anyway.
        return secs.is_finite().then(|| Duration::from_secs_f64(secs.min(86_400.0)));
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// The three date formats HTTP allows (RFC 9110 §5.6.7), all in GMT.
fn parse_http_date(value: &str) -> Option<SystemTime> {
    use chrono::{DateTime, NaiveDateTime};
    // IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT", is a subset of RFC 2822.
    if let Ok(date) = DateTime::parse_from_rfc2822(value) {
        return Some(date.into());
    }
    let formats = [
        "%A, %d-%b-%y %H:%M:%S GMT", // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
        "%a %b %e %H:%M:%S %Y",      // asctime: "Sun Nov  6 08:49:37 1994"
    ];
    formats.iter().find_map(|format| NaiveDateTime::parse_from_str(value, format).ok()).map(|naive| naive.and_utc().into())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::provider::ProviderError;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    // 1994-11-06 08:49:37 UTC
    const NOV_6_1994: u64 = 784_111_777;

    #[test]
    fn retry_after_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("1.5", now), Some(Duration::from_millis(1500)));
        assert_eq!(parse_retry_after("99999999999999999999999", now), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_retry_after("", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("1.2.3", now), None);
    }

    #[test]
    fn retry_after_http_dates() {
        let now = at(NOV_6_1994 - 30);
        let thirty = Some(Duration::from_secs(30));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), thirty);
        assert_eq!(parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now), thirty);
        assert_eq!(parse_retry_after("Sun Nov  6 08:49:37 1994", now), thirty);
        // In the past: retry now.
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", at(NOV_6_1994 + 5)), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 25:49:37 GMT", now), None);
    }

    #[test]
    fn retry_after_headers_prefer_milliseconds() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
    }

    #[test]
    fn delays_follow_the_policy_and_cap_retry_after() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.max_attempts(), 4);
        assert_eq!(policy.delay(0, None), Duration::from_secs(1));
        assert_eq!(policy.delay(2, None), Duration::from_secs(4));
        assert_eq!(policy.delay(9, None), Duration::from_secs(4));
        assert_eq!(policy.delay(0, Some(Duration::from_secs(3))), Duration::from_secs(3));
        assert_eq!(policy.delay(0, Some(Duration::from_secs(3600))), MAX_RETRY_AFTER);
        assert_eq!(RetryPolicy::none().max_attempts(), 1);
        assert_eq!(RetryPolicy::none().delay(0, None), Duration::ZERO);
    }

    fn failure(retryable: bool) -> ChatResponse {
        ChatResponse::failed(ProviderError { status: Some(503), retryable, message: "HTTP 503: busy".into() })
    }

    async fn count_attempts(policy: RetryPolicy, make: impl Fn(usize) -> Attempt) -> (ChatResponse, usize) {
        let calls = AtomicUsize::new(0);
        let response = policy
            .run(|| {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                let attempt = make(n);
                async move { attempt }
            })
            .await;
        (response, calls.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn gives_up_after_the_last_retry_with_a_clear_message() {
        let (response, calls) = count_attempts(RetryPolicy::fast(), |_| Attempt::plain(failure(true))).await;
        assert_eq!(calls, 4);
        let message = &response.error.unwrap().message;
        assert_eq!(message, "the model provider is unavailable after 4 attempts: HTTP 503: busy");
    }

    #[tokio::test]
    async fn stops_on_success_permanent_errors_and_streamed_text() {
        let (response, calls) = count_attempts(RetryPolicy::fast(), |n| {
            Attempt::plain(if n < 2 { failure(true) } else { ChatResponse::default() })
        })
        .await;
        assert!(!response.is_error());
        assert_eq!(calls, 3);

        let (response, calls) = count_attempts(RetryPolicy::fast(), |_| Attempt::plain(failure(false))).await;
        assert_eq!(calls, 1);
        assert_eq!(response.error.unwrap().message, "HTTP 503: busy");

        let (_, calls) = count_attempts(RetryPolicy::fast(), |_| Attempt {
            response: failure(true),
            retry_after: None,
            streamed: true,
        })
        .await;
        assert_eq!(calls, 1);

        let (response, calls) = count_attempts(RetryPolicy::none(), |_| Attempt::plain(failure(true))).await;
        assert_eq!(calls, 1);
        assert_eq!(response.error.unwrap().message, "HTTP 503: busy", "one attempt is not 'after 1 attempts'");
    }
}
