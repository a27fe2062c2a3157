//! Fallback models (`[agent] fallback_models`): a [`Provider`] over an
//! ordered list of models, each a [`ModelHandle`] on its own provider.
//!
//! A request goes to the first model. When it fails for a reason on the
//! provider's side, the next model gets the same request, and so on:
//! - provider-side: retryable errors (5xx, 529 overloaded, timeouts,
//!   connection failures), which reach here only after the provider's own
//!   retries are used up; a refused key (401/403) and billing or quota
//!   refusals (402, quota 429), which another provider's account may not
//!   have;
//! - not provider-side: a request the API rejects (400, 404, 413, 422 …):
//!   the next model would most likely reject it too, and moving on would
//!   hide the problem;
//! - never after streamed text reached the user (the failed response then
//!   carries that text): a second model would start a second answer.
//!
//! Each switch is logged, and the last one is kept for `/status`.

use std::sync::{Arc, Mutex};

use super::{ChatRequest, ChatResponse, ModelHandle, Provider, ProviderError, StreamSink};

/// One model of the list and the provider that serves it.
#[derive(Clone)]
pub struct FallbackEntry {
    /// Which model, where, with which limits.
    pub handle: ModelHandle,
    /// The provider `handle.provider` names.
    pub provider: Arc<dyn Provider>,
}

/// Models tried in order; see the module docs.
pub struct FallbackProvider {
    primary: Arc<dyn Provider>,
    primary_label: String,
    fallbacks: Vec<FallbackEntry>,
    last_switch: Mutex<Option<String>>,
}

impl FallbackProvider {
    /// `primary` (serving the request's own model, labelled
    /// `primary_label` in logs), then `fallbacks` in order.
    pub fn new(primary: Arc<dyn Provider>, primary_label: impl Into<String>, fallbacks: Vec<FallbackEntry>) -> Self {
        FallbackProvider { primary, primary_label: primary_label.into(), fallbacks, last_switch: Mutex::new(None) }
    }
}

/// Whether another model could succeed where this one failed.
pub(super) fn provider_side(error: &ProviderError) -> bool {
    if error.retryable {
        return true;
    }
    let billing = error.message.contains("billing or quota");
    matches!(error.status, Some(401 | 402 | 403)) || billing
}

#[async_trait::async_trait]
impl Provider for FallbackProvider {
    async fn chat(&self, request: &ChatRequest, stream: Option<StreamSink>) -> ChatResponse {
        let mut response = self.primary.chat(request, stream.clone()).await;
        let mut failed = self.primary_label.clone();
        for entry in &self.fallbacks {
            let Some(error) = response.error.as_ref().filter(|_| response.is_error()) else {
                return response;
            };
            // Streamed text is with the user: no second answer.
            if response.content.as_deref().is_some_and(|c| !c.is_empty()) || !provider_side(error) {
                return response;
            }
            let next = entry.handle.label();
            tracing::warn!(from = %failed, to = %next, "model request failed, falling back: {}", error.message);
            *self.last_switch.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(format!("fell back from {failed} to {next} at {}: {}", chrono::Utc::now().format("%H:%M:%S UTC"), error.message));
            let mut request = request.clone();
            request.model = entry.handle.model.clone();
            request.max_tokens = request.max_tokens.min(entry.handle.max_output_tokens);
            let before = response.error.take();
            response = entry.provider.chat(&request, stream.clone()).await;
            response.answered_by = Some(entry.handle.clone());
            if let (Some(error), Some(before)) = (response.error.as_mut(), before) {
                // Every failure is worth reading when all of them failed.
                error.message = format!("{} (after {failed} failed: {})", error.message, before.message);
            }
            failed = next;
        }
        response
    }

    fn name(&self) -> &str {
        self.primary.name()
    }

    fn status_note(&self) -> Option<String> {
        let models: Vec<String> = self.fallbacks.iter().map(|e| e.handle.label()).collect();
        let last = self.last_switch.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Some(match last {
            Some(last) => format!("fallbacks: {} — {last}", models.join(", ")),
            None => format!("fallbacks: {} (not used yet)", models.join(", ")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_provider_side_failures_fall_back() {
        let error = |status: Option<u16>, retryable: bool, message: &str| ProviderError { status, retryable, message: message.into() };
        assert!(provider_side(&error(Some(500), true, "down")));
        assert!(provider_side(&error(None, true, "connection refused")));
        assert!(provider_side(&error(Some(401), false, "refused the API key")));
        assert!(provider_side(&error(Some(429), false, "refused the request for billing or quota reasons")));
        assert!(!provider_side(&error(Some(400), false, "rejected the request")));
        assert!(!provider_side(&error(Some(404), false, "model or endpoint not found")));
        assert!(!provider_side(&error(Some(200), false, "over the limit")));
    }
}
