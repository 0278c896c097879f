//! Who holds an accept loop's connection slots, by peer address, and which
//! connection to close when every slot is held and a peer holding fewer
//! asks for one. No I/O and no clock: the accept loop keeps one
//! [`Registry`] behind a mutex, tells it when a connection takes or gives
//! back a slot, and asks it for a victim ([`Registry::choose_victim`]),
//! saying which connections are idle and since when.
//!
//! The rule: a newcomer from peer `n` may have a connection of the peer
//! `p` holding the most connections closed (the first by the caller's
//! order: a request stalled arriving before an idle connection, then the
//! longest stalled or idle) only if
//! `p` holds strictly more than `n` would hold once admitted
//! (`held(p) > held(n) + 1`). After the swap `p` still holds at least as
//! many as `n`, so two peers converge to equal shares and never take
//! slots back and forth.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};

/// The address a connection counts against: the peer's IP address, port
/// ignored; an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as a dual-stack
/// listener reports an IPv4 client) counts as its IPv4 address.
pub fn peer_key(peer: SocketAddr) -> IpAddr {
    peer.ip().to_canonical()
}

/// One registered connection: its peer and a number unique within its
/// [`Registry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    peer: IpAddr,
    n: u64,
}

impl ConnId {
    /// The peer the connection counts against ([`peer_key`]).
    pub fn peer(self) -> IpAddr {
        self.peer
    }
}

/// A connection holding a slot, and whether it is being closed for a
/// newcomer (then it no longer counts for its peer and is not chosen again).
#[derive(Debug)]
struct Entry<C> {
    conn: C,
    evicted: bool,
}

/// One peer's connections (by number: oldest first) and slots reserved for
/// its newcomers whose victims are still closing.
#[derive(Debug)]
struct Peer<C> {
    conns: BTreeMap<u64, Entry<C>>,
    evicted: usize,
    reserved: usize,
}

impl<C> Peer<C> {
    fn held(&self) -> usize {
        self.conns.len() - self.evicted + self.reserved
    }

    fn is_empty(&self) -> bool {
        self.conns.is_empty() && self.reserved == 0
    }
}

/// A connection chosen by [`Registry::choose_victim`].
#[derive(Debug)]
pub struct Victim<'a, C, K> {
    /// The connection.
    pub id: ConnId,
    /// Why it may be closed: the key it was chosen by.
    pub key: K,
    /// What its peer held before the choice (connections, reservations
    /// included).
    pub peer_held: usize,
    /// Its value, for the caller to tell it to close.
    pub conn: &'a mut C,
}

/// The connections holding slots, by peer. `C` is what the caller keeps
/// per connection (a handle to close it).
#[derive(Debug)]
pub struct Registry<C> {
    next: u64,
    peers: HashMap<IpAddr, Peer<C>>,
}

impl<C> Default for Registry<C> {
    fn default() -> Self {
        Self {
            next: 0,
            peers: HashMap::new(),
        }
    }
}

impl<C> Registry<C> {
    /// Record a connection from `peer` that has taken a slot.
    pub fn insert(&mut self, peer: IpAddr, conn: C) -> ConnId {
        let n = self.next;
        self.next += 1;
        let entry = Entry {
            conn,
            evicted: false,
        };
        self.peer_mut(peer).conns.insert(n, entry);
        ConnId { peer, n }
    }

    fn peer_mut(&mut self, peer: IpAddr) -> &mut Peer<C> {
        self.peers.entry(peer).or_insert_with(|| Peer {
            conns: BTreeMap::new(),
            evicted: 0,
            reserved: 0,
        })
    }

    /// Forget a connection that gave its slot back; its value, or `None`
    /// if it was not registered.
    pub fn remove(&mut self, id: ConnId) -> Option<C> {
        let peer = self.peers.get_mut(&id.peer)?;
        let entry = peer.conns.remove(&id.n)?;
        if entry.evicted {
            peer.evicted -= 1;
        }
        if peer.is_empty() {
            self.peers.remove(&id.peer);
        }
        Some(entry.conn)
    }

    /// Slots `peer` holds: its connections not being closed for a
    /// newcomer, plus the slots reserved for its newcomers.
    pub fn held(&self, peer: IpAddr) -> usize {
        self.peers.get(&peer).map_or(0, Peer::held)
    }

    /// For a newcomer from `newcomer` while every slot is held: the
    /// connection of the peer holding the most slots with the smallest
    /// `evictable` key, if that peer holds strictly more than `newcomer`
    /// would once admitted and has a connection that may be closed.
    /// `evictable` says whether a connection may be closed and in which
    /// order (the caller's: a request stalled arriving first, then idle,
    /// each the longest first), `None` when it may not be (a request being
    /// handled, or not idle nor stalled long enough). Among peers tied for
    /// the most, the smallest key (then the oldest connection) is chosen.
    ///
    /// The victim is marked as closing (it no longer counts for its peer
    /// and is not chosen again) and a slot is reserved for `newcomer`
    /// (counted in [`Self::held`]) until [`Self::release`].
    pub fn choose_victim<K: Ord>(
        &mut self,
        newcomer: IpAddr,
        evictable: impl Fn(&C) -> Option<K>,
    ) -> Option<Victim<'_, C, K>> {
        let admitted = self.held(newcomer) + 1;
        let most = self
            .peers
            .iter()
            .filter(|(ip, _)| **ip != newcomer)
            .map(|(_, p)| p.held())
            .max()?;
        if most <= admitted {
            return None;
        }
        let (key, peer, n) = self
            .peers
            .iter()
            .filter(|(ip, p)| **ip != newcomer && p.held() == most)
            .flat_map(|(ip, p)| {
                p.conns
                    .iter()
                    .filter(|(_, e)| !e.evicted)
                    .filter_map(|(n, e)| evictable(&e.conn).map(|key| (key, *ip, *n)))
            })
            .min_by(|(a, _, an), (b, _, bn)| a.cmp(b).then(an.cmp(bn)))?;
        let victim_peer = self.peers.get_mut(&peer)?;
        victim_peer.conns.get_mut(&n)?.evicted = true;
        victim_peer.evicted += 1;
        self.peer_mut(newcomer).reserved += 1;
        let conn = &mut self.peers.get_mut(&peer)?.conns.get_mut(&n)?.conn;
        Some(Victim {
            id: ConnId { peer, n },
            key,
            peer_held: most,
            conn,
        })
    }

    /// Take back the choice of `id` as a victim (a request has started
    /// arriving on it since): it counts for its peer again and may be chosen
    /// again. Its value, for the caller to tell the newcomer it was chosen
    /// for (whose reservation stays until [`Self::release`]); `None` if it
    /// is not registered or was not chosen.
    pub fn spare(&mut self, id: ConnId) -> Option<&mut C> {
        let peer = self.peers.get_mut(&id.peer)?;
        let entry = peer.conns.get_mut(&id.n)?;
        if !entry.evicted {
            return None;
        }
        entry.evicted = false;
        peer.evicted -= 1;
        Some(&mut entry.conn)
    }

    /// End a reservation [`Self::choose_victim`] made for a newcomer from
    /// `newcomer` (it got a slot, and is [inserted](Self::insert) now, or
    /// gave up).
    pub fn release(&mut self, newcomer: IpAddr) {
        if let Some(p) = self.peers.get_mut(&newcomer) {
            p.reserved = p.reserved.saturating_sub(1);
            if p.is_empty() {
                self.peers.remove(&newcomer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;

    /// A test connection: a name and when it became idle (`None`: busy).
    #[derive(Debug, Clone, Copy)]
    struct Conn {
        name: &'static str,
        idle_since: Option<Instant>,
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const A: &str = "10.0.0.1";
    const B: &str = "10.0.0.2";
    const C: &str = "10.0.0.3";

    /// Connections from `peer`, one per name, the `i`th idle since `t0 + i`
    /// seconds (the first idle longest), or all busy.
    fn add(
        r: &mut Registry<Conn>,
        peer: &str,
        names: &[&'static str],
        t0: Instant,
        busy: bool,
    ) -> Vec<ConnId> {
        names
            .iter()
            .zip(0u64..)
            .map(|(name, i)| {
                let idle_since = (!busy).then(|| t0 + Duration::from_secs(i));
                r.insert(ip(peer), Conn { name, idle_since })
            })
            .collect()
    }

    fn victim(r: &mut Registry<Conn>, newcomer: &str) -> Option<(&'static str, usize)> {
        r.choose_victim(ip(newcomer), |c| c.idle_since)
            .map(|v| (v.conn.name, v.peer_held))
    }

    #[test]
    fn the_peer_holding_every_slot_gives_its_longest_idle_connection() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        add(&mut r, A, &["a0", "a1", "a2", "a3"], t0, false);
        assert_eq!(victim(&mut r, B), Some(("a0", 4)));
        // The victim no longer counts for A; the newcomer's reserved slot
        // counts for B.
        assert_eq!(r.held(ip(A)), 3);
        assert_eq!(r.held(ip(B)), 1);
    }

    #[test]
    fn the_callers_order_comes_first_then_age() {
        // Keys as the listener's: (0, since) stalled, (1, since) idle.
        let t0 = Instant::now();
        let mut r = Registry::default();
        let key = |k: u8, s: u64| Some((k, t0 + Duration::from_secs(s)));
        let names = ["idle-long", "stalled-recent", "stalled-long", "busy"];
        let keys = [key(1, 0), key(0, 9), key(0, 5), None];
        let ids: Vec<_> = names.iter().map(|n| r.insert(ip(A), *n)).collect();
        let of = |c: &&str| keys[names.iter().position(|n| n == c).unwrap()];
        let v = r.choose_victim(ip(B), of).unwrap();
        assert_eq!((*v.conn, v.key), ("stalled-long", key(0, 5).unwrap()));
        assert_eq!(v.id, ids[2]);
        let v = r.choose_victim(ip(C), of).unwrap();
        assert_eq!(*v.conn, "stalled-recent");
        // Then the idle one (A holds 2, a third newcomer would hold 1);
        // never the busy one (A holds 1 then: no more anyway).
        let v = r.choose_victim(ip("10.0.0.4"), of).unwrap();
        assert_eq!(*v.conn, "idle-long");
        assert!(r.choose_victim(ip("10.0.0.5"), of).is_none());
    }

    #[test]
    fn longest_idle_is_by_idle_time_not_by_age() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        r.insert(
            ip(A),
            Conn {
                name: "old-recent",
                idle_since: Some(t0 + Duration::from_secs(10)),
            },
        );
        r.insert(
            ip(A),
            Conn {
                name: "young-long",
                idle_since: Some(t0),
            },
        );
        assert_eq!(victim(&mut r, B), Some(("young-long", 2)));
    }

    #[test]
    fn busy_connections_are_never_chosen() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        add(&mut r, A, &["a0", "a1", "a2"], t0, true);
        add(&mut r, A, &["a3"], t0 + Duration::from_secs(5), false);
        assert_eq!(victim(&mut r, B), Some(("a3", 4)));
        // Only busy ones left: nothing to evict, nothing reserved.
        assert_eq!(victim(&mut r, C), None);
        assert_eq!(r.held(ip(C)), 0);
    }

    #[test]
    fn when_the_biggest_peer_is_all_busy_nothing_is_evicted() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        add(&mut r, A, &["a0", "a1", "a2"], t0, true);
        // B holds fewer than A but more than C would: still not B's, the
        // rule names the peer holding the most.
        add(&mut r, B, &["b0", "b1"], t0, false);
        assert_eq!(victim(&mut r, C), None);
    }

    #[test]
    fn equal_shares_do_not_evict() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        add(&mut r, A, &["a0", "a1"], t0, false);
        add(&mut r, B, &["b0", "b1"], t0, false);
        // B would hold 3 against A's 2: no.
        assert_eq!(victim(&mut r, B), None);
        assert_eq!(victim(&mut r, A), None);
        // A third peer would hold 1 against 2: yes, the longest idle of
        // the two tied peers (a0 and b0 are idle as long: the older, a0).
        assert_eq!(victim(&mut r, C), Some(("a0", 2)));
    }

    #[test]
    fn one_more_than_the_newcomer_would_hold_is_not_enough() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        add(&mut r, A, &["a0", "a1"], t0, false);
        add(&mut r, B, &["b0"], t0, false);
        // B would hold 2, A holds 2: no swap (it would only move the
        // imbalance to the other side).
        assert_eq!(victim(&mut r, B), None);
    }

    #[test]
    fn two_peers_converge_to_equal_shares_without_ping_pong() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        let a = add(&mut r, A, &["a0", "a1", "a2", "a3"], t0, false);
        // B's newcomers, each admitted once its victim is gone.
        let mut evicted = Vec::new();
        while let Some(v) = r.choose_victim(ip(B), |c| c.idle_since) {
            let id = v.id;
            evicted.push(v.conn.name);
            r.remove(id).unwrap();
            r.release(ip(B));
            r.insert(
                ip(B),
                Conn {
                    name: "b",
                    idle_since: Some(t0 + Duration::from_secs(100)),
                },
            );
        }
        assert_eq!(evicted, ["a0", "a1"]);
        assert_eq!((r.held(ip(A)), r.held(ip(B))), (2, 2));
        // A's newcomers do not take them back.
        assert_eq!(victim(&mut r, A), None);
        assert!(r.remove(a[3]).is_some());
    }

    #[test]
    fn a_chosen_victim_is_not_chosen_again_and_reservations_count() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        add(&mut r, A, &["a0", "a1", "a2", "a3"], t0, false);
        // Two newcomers from B before either victim has closed: A 4 -> 3
        // -> 2, B 0 -> 1 -> 2; a third gets nothing.
        assert_eq!(victim(&mut r, B), Some(("a0", 4)));
        assert_eq!(victim(&mut r, B), Some(("a1", 3)));
        assert_eq!(victim(&mut r, B), None);
        // A newcomer that gives up releases its reservation: B holds 1,
        // A 2, so a newcomer from C (would hold 1) gets one of A's.
        r.release(ip(B));
        assert_eq!(r.held(ip(B)), 1);
        assert_eq!(victim(&mut r, C), Some(("a2", 2)));
    }

    #[test]
    fn a_spared_victim_counts_again_and_may_be_chosen_again() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        let a = add(&mut r, A, &["a0", "a1", "a2"], t0, false);
        assert_eq!(victim(&mut r, B), Some(("a0", 3)));
        assert_eq!(r.held(ip(A)), 2);
        assert_eq!(r.spare(a[0]).map(|c| c.name), Some("a0"));
        // Not twice; a connection never chosen is not spared.
        assert!(r.spare(a[0]).is_none());
        assert!(r.spare(a[1]).is_none());
        assert_eq!(r.held(ip(A)), 3);
        // B's reservation stays until released.
        assert_eq!(r.held(ip(B)), 1);
        r.release(ip(B));
        assert_eq!(victim(&mut r, B), Some(("a0", 3)));
    }

    #[test]
    fn removing_the_last_connection_forgets_the_peer() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        let ids = add(&mut r, A, &["a0"], t0, false);
        assert_eq!(r.remove(ids[0]).map(|c| c.name), Some("a0"));
        assert_eq!(r.remove(ids[0]).map(|c| c.name), None);
        assert!(r.peers.is_empty());
        assert_eq!(victim(&mut r, B), None);
        assert!(r.peers.is_empty(), "no reservation without a victim");
    }

    #[test]
    fn ipv4_mapped_ipv6_peers_count_as_ipv4() {
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:4000".parse().unwrap();
        let plain: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        assert_eq!(peer_key(mapped), peer_key(plain));
        assert_eq!(peer_key(plain), ip(A));
        let v6: SocketAddr = "[2001:db8::1]:80".parse().unwrap();
        assert_eq!(peer_key(v6), ip("2001:db8::1"));
    }
}
