//! An inference server inside this process, on a free loopback port: how `temper sft` evaluates
//! the weights it is training with the same engine, HTTP API and environment code as `temper
//! eval` against a real server.

use candle_core::Tensor;
use temper_model::{ChatTemplate, Tokenizer, Transformer};

use crate::{Engine, EngineConfig, ServerState};

/// Why a local server did not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalServerError {
    /// The weights could not be copied.
    #[error("cannot copy the weights to serve: {0}")]
    Weights(#[from] candle_core::Error),
    /// The copied weights do not make a model.
    #[error("cannot build the served model: {0}")]
    Model(#[from] temper_model::ModelError),
    /// No loopback port could be opened.
    #[error("cannot open a loopback port for the local server: {0}")]
    Listen(#[from] std::io::Error),
}

/// A running server; dropping it stops it.
#[derive(Debug)]
pub struct LocalServer {
    /// Its base URL (`http://127.0.0.1:PORT/v1`).
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl LocalServer {
    /// Serves a copy of `model`'s current weights (training may go on changing the originals).
    pub async fn start(
        model: &Transformer,
        tokenizer: &Tokenizer,
        template: Option<&ChatTemplate>,
        version: u64,
    ) -> Result<Self, LocalServerError> {
        let copies = model
            .tensors()
            .into_iter()
            .map(|(n, t)| Ok((n, t.copy()?)))
            .collect::<candle_core::Result<std::collections::BTreeMap<String, Tensor>>>(
        )?;
        let copy = Transformer::from_tensors(
            model.config().clone(),
            copies,
            model.dtype(),
            model.device(),
        )?;
        let template = template.cloned();
        let engine = Engine::start(copy, tokenizer.clone(), EngineConfig::default(), version);
        let state = ServerState::new(
            engine,
            template,
            "policy".into(),
            model.dtype(),
            model.device().clone(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/v1", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, crate::router(state))
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!("local inference server: {e}");
            }
        });
        Ok(Self { url, stop: Some(stop), task: Some(task) })
    }

    /// Stops the server and waits for it.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
