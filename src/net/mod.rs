//! Networking: listeners, connections, and the sendfile writer.

pub(crate) mod connection;
pub(crate) mod limits;
pub(crate) mod listener;
pub(crate) mod sendfile;
