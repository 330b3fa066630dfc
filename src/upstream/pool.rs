//! A shard's connections to the upstream brokers.
//!
//! Two kinds, because a Kafka broker works through one connection's requests one at a time:
//! - *ordered* connections, up to `pool_size` lanes per broker: each client connection's
//!   Produce requests to that broker go over one lane, so its pipelined produces reach the broker
//!   in the order they were sent, while produces of different clients are worked on side by side
//!   (over one connection the broker would take them one at a time);
//! - *leased* connections for everything else: a long-polling Fetch holds its connection until
//!   the broker answers, so each request takes an idle one (or opens one) for itself and gives
//!   it back after. Up to `pool_size` idle ones are kept per broker.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::connection::Connection;
use super::Upstream;
use std::sync::Arc;

#[derive(Debug, Default)]
struct BrokerConnections {
    /// The broker's address when these were opened: a broker that moved gets new ones.
    address: String,
    /// Ordered connections by lane.
    ordered: HashMap<usize, Rc<Connection>>,
    idle: Vec<Rc<Connection>>,
}

#[derive(Debug)]
pub struct Pool {
    pub node: Arc<crate::node::Node>,
    pub upstream: Arc<Upstream>,
    brokers: RefCell<HashMap<i32, BrokerConnections>>,
}

/// A connection taken from the pool for one request; given back when dropped.
#[derive(Debug)]
pub struct Lease {
    pool: Rc<Pool>,
    broker: i32,
    connection: Option<Rc<Connection>>,
}

impl std::ops::Deref for Lease {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.connection.as_ref().expect("a lease holds its connection until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(connection) = self.connection.take() else { return };
        // A request abandoned mid-flight (its client went away) leaves a response to come: the
        // connection is not reused for another request.
        if connection.is_closed() || connection.in_flight() > 0 {
            return;
        }
        let mut brokers = self.pool.brokers.borrow_mut();
        if let Some(b) = brokers.get_mut(&self.broker) {
            if b.address == connection.address && b.idle.len() < self.pool.upstream.config.pool_size {
                b.idle.push(connection);
            }
        }
    }
}

impl Pool {
    pub fn new(node: Arc<crate::node::Node>, upstream: Arc<Upstream>) -> Pool {
        Pool { node, upstream, brokers: RefCell::new(HashMap::new()) }
    }

    /// The broker's entry, emptied first if the broker's address changed.
    fn with_broker<T>(&self, broker: i32, address: &str, f: impl FnOnce(&mut BrokerConnections) -> T) -> T {
        let mut brokers = self.brokers.borrow_mut();
        let entry = brokers.entry(broker).or_default();
        if entry.address != address {
            *entry = BrokerConnections { address: address.to_string(), ..Default::default() };
        }
        f(entry)
    }

    /// The ordered connection of `lane` (taken modulo `pool_size`) to `broker` at `address`,
    /// opened again if it was lost.
    pub fn ordered(&self, broker: i32, address: &str, lane: usize) -> Rc<Connection> {
        let lane = lane % self.upstream.config.pool_size;
        self.with_broker(broker, address, |b| match b.ordered.get(&lane) {
            Some(c) if !c.is_closed() => c.clone(),
            _ => {
                crate::metrics::upstream_connection_opened(broker);
                let c = Rc::new(Connection::open(address.to_string(), self.upstream.dialer.clone()));
                b.ordered.insert(lane, c.clone());
                c
            }
        })
    }

    /// An idle connection to `broker`, or a new one.
    pub fn lease(self: &Rc<Self>, broker: i32, address: &str) -> Lease {
        let connection = self.with_broker(broker, address, |b| {
            while let Some(c) = b.idle.pop() {
                if !c.is_closed() {
                    return c;
                }
            }
            crate::metrics::upstream_connection_opened(broker);
            Rc::new(Connection::open(address.to_string(), self.upstream.dialer.clone()))
        });
        Lease { pool: self.clone(), broker, connection: Some(connection) }
    }
}
