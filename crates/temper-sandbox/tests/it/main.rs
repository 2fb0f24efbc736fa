//! Integration tests of the sandbox: behaviour, limits and the hostile suite.

mod basics;
mod hostile;
mod server;
mod support;
