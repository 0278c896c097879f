//! Who waits for a connection slot (holds a seat), by peer address, and
//! which waiting connection to drop when every seat is taken and another
//! connection is accepted. No I/O and no clock: the accept loop keeps one
//! [`Seats`] behind a mutex, asks it to [seat](Seats::seat) each connection
//! it accepts, and tells it when a connection leaves its seat (it got a
//! slot, or gave up).
//!
//! The rule, the same "+1" rule as for slots ([`super::slots`]): when every
//! seat is taken, the newcomer from peer `n` takes the seat of a waiting
//! connection of the peer `p` with the most waiting only if `p` has strictly
//! more waiting than `n` would have once seated
//! (`waiting(p) > waiting(n) + 1`); otherwise the newcomer is refused. After
//! the swap `p` still has at least as many waiting as `n`, so two peers
//! converge to equal shares of the seats and never take them back and
//! forth, and the number waiting never exceeds the capacity.
//!
//! A slot freed by a connection that ends goes to a waiting connection by
//! peer too ([`Seats::next_for_slot`]): the peers with connections waiting
//! take turns (the one served longest ago first, then the one holding the
//! fewest slots), not the connection waiting longest whatever its peer.
//! So a peer's wait for a slot does not grow with the number of
//! connections other peers keep waiting.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// One seated connection: its peer and a number unique within its
/// [`Seats`] (increasing: a smaller number was seated earlier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeatId {
    peer: IpAddr,
    n: u64,
}

impl SeatId {
    /// The peer the connection counts against.
    pub fn peer(self) -> IpAddr {
        self.peer
    }
}

/// A waiting connection whose seat was given to a newcomer.
#[derive(Debug)]
pub struct Unseated<C> {
    /// The connection.
    pub id: SeatId,
    /// How many its peer had waiting before (itself included).
    pub peer_waiting: usize,
    /// Its value, for the caller to drop the connection.
    pub conn: C,
}

/// A newcomer given a seat by [`Seats::seat`].
#[derive(Debug)]
pub struct Seated<C> {
    /// The newcomer's seat, to [remove](Seats::remove) when it leaves.
    pub id: SeatId,
    /// The waiting connection that lost its seat to the newcomer, if every
    /// seat was taken.
    pub unseated: Option<Unseated<C>>,
}

/// The connections waiting for a slot, by peer, at most `capacity` at
/// once. `C` is what the caller keeps per connection (a handle to drop it).
#[derive(Debug)]
pub struct Seats<C> {
    capacity: usize,
    next: u64,
    len: usize,
    /// Each peer's waiting connections by number, oldest first; a peer with
    /// none is not in the map.
    peers: HashMap<IpAddr, BTreeMap<u64, C>>,
    /// When each peer was last handed a slot ([`Seats::next_for_slot`]'s
    /// turn number), kept after its queue empties so that a peer re-opening
    /// one connection as soon as it is served does not count as new; not
    /// there: never, or more than [`Seats::remembered`] turns ago.
    served: HashMap<IpAddr, u64>,
    turn: u64,
}

impl<C> Seats<C> {
    /// No connection waiting; at most `capacity` at once.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            next: 0,
            len: 0,
            peers: HashMap::new(),
            served: HashMap::new(),
            turn: 0,
        }
    }

    /// Connections from `peer` waiting.
    pub fn waiting(&self, peer: IpAddr) -> usize {
        self.peers.get(&peer).map_or(0, BTreeMap::len)
    }

    /// Seat a newly accepted connection from `peer`: in a free seat if there
    /// is one; else in the seat of the oldest waiting connection of the peer
    /// with the most waiting, if that peer has strictly more waiting than
    /// `peer` would once seated (returned in [`Seated::unseated`], for the
    /// caller to drop); else not at all: `Err(conn)`, for the caller to drop
    /// the newcomer. Among peers tied for the most, the one whose oldest
    /// waiting connection is the oldest gives its seat.
    ///
    /// The oldest waiting connection is the one to go, not the newest: it
    /// is the nearest to its own timeout (so its client loses the least
    /// wait), and, slots freed by a connection that ends going to the
    /// connections waiting longest first, it is the one standing first in
    /// line ahead of the newcomer. An attacker that re-opens its
    /// connections as they go also gains nothing from the choice: dropped
    /// either way, it has to re-open one per newcomer.
    pub fn seat(&mut self, peer: IpAddr, conn: C) -> Result<Seated<C>, C> {
        let unseated = if self.len < self.capacity {
            None
        } else {
            let seated = self.waiting(peer) + 1;
            let Some((victim, peer_waiting, n)) = self
                .peers
                .iter()
                .filter(|(ip, _)| **ip != peer)
                .filter_map(|(ip, w)| w.first_key_value().map(|(n, _)| (*ip, w.len(), *n)))
                .max_by_key(|(_, waiting, n)| (*waiting, std::cmp::Reverse(*n)))
            else {
                return Err(conn);
            };
            if peer_waiting <= seated {
                return Err(conn);
            }
            let id = SeatId { peer: victim, n };
            let Some(conn) = self.remove(id) else {
                return Err(conn);
            };
            Some(Unseated {
                id,
                peer_waiting,
                conn,
            })
        };
        let n = self.next;
        self.next += 1;
        self.peers.entry(peer).or_default().insert(n, conn);
        self.len += 1;
        Ok(Seated {
            id: SeatId { peer, n },
            unseated,
        })
    }

    /// The waiting connection a freed slot goes to, taken from its seat:
    /// the oldest waiting connection of a peer with one waiting, the peers
    /// taking turns: first a peer never handed a slot (as far as
    /// [`Seats::served`] remembers), else the one handed one longest ago,
    /// whether or not its queue emptied in between; among those
    /// tied, the peer holding the fewest slots (`held`, as
    /// [`super::slots::Registry::held`] counts them), then the one whose
    /// oldest waiting connection is the oldest. `None` if none waits.
    ///
    /// Not the connection waiting longest whatever its peer: with slots
    /// handed out in arrival order, a client's wait is as long as the line
    /// of connections ahead of it, so a peer that keeps many connections
    /// waiting (re-opening them as fast as they are served or dropped)
    /// makes every other peer wait as long. Turns rather than the fewest
    /// slots held first: a client keeping a pool of connections holds more
    /// slots than one churning short connections, and would wait behind
    /// all of its connections.
    pub fn next_for_slot(&mut self, held: impl Fn(IpAddr) -> usize) -> Option<(SeatId, C)> {
        let served = &self.served;
        let (peer, n) = self
            .peers
            .iter()
            .filter_map(|(ip, w)| w.first_key_value().map(|(n, _)| (*ip, *n)))
            .min_by_key(|(ip, n)| (served.get(ip).copied(), held(*ip), *n))?;
        let id = SeatId { peer, n };
        let conn = self.remove(id)?;
        self.turn += 1;
        self.served.insert(peer, self.turn);
        self.forget_long_served();
        Some((id, conn))
    }

    /// How many turns a peer's last slot is remembered for: four times the
    /// capacity, at least 64. Past that, a peer counts as never served,
    /// which ranks it where it would rank anyway (served longest ago).
    fn remembered(&self) -> u64 {
        u64::try_from(self.capacity.max(16)).unwrap_or(u64::MAX / 8) * 4
    }

    /// Bounds [`Seats::served`]: once it holds twice [`Seats::remembered`]
    /// entries more than there are peers waiting, the peers without
    /// connections waiting served more than `remembered` turns ago are
    /// forgotten. At most `remembered` entries of peers not waiting remain
    /// (one per turn), so the next pass is `remembered` turns away: O(1)
    /// amortized per slot handed out, and memory bounded by the seats and
    /// the turns remembered, not by how many addresses ever connected.
    fn forget_long_served(&mut self) {
        let remembered = self.remembered();
        let limit = usize::try_from(remembered.saturating_mul(2)).unwrap_or(usize::MAX);
        if self.served.len() <= limit.saturating_add(self.peers.len()) {
            return;
        }
        let since = self.turn.saturating_sub(remembered);
        let peers = &self.peers;
        self.served
            .retain(|ip, turn| *turn > since || peers.contains_key(ip));
    }

    /// Forget a connection that left its seat; its value, or `None` if it
    /// was not seated (or has lost its seat to a newcomer).
    pub fn remove(&mut self, id: SeatId) -> Option<C> {
        let waiting = self.peers.get_mut(&id.peer)?;
        let conn = waiting.remove(&id.n)?;
        if waiting.is_empty() {
            self.peers.remove(&id.peer);
        }
        self.len -= 1;
        Some(conn)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const A: &str = "10.0.0.1";
    const B: &str = "10.0.0.2";
    const C: &str = "10.0.0.3";

    /// Seat `names` from `peer`, each of which must get a free seat.
    fn fill(s: &mut Seats<&'static str>, peer: &str, names: &[&'static str]) -> Vec<SeatId> {
        names
            .iter()
            .map(|name| {
                let seated = s.seat(ip(peer), name).unwrap();
                assert!(seated.unseated.is_none(), "{name} took someone's seat");
                seated.id
            })
            .collect()
    }

    /// Seat `name` from `peer`: `Ok(Some(name of the unseated, its peer's
    /// count))`, `Ok(None)` for a free seat, `Err(())` if refused.
    fn seat(
        s: &mut Seats<&'static str>,
        peer: &str,
        name: &'static str,
    ) -> Result<Option<(&'static str, usize)>, ()> {
        match s.seat(ip(peer), name) {
            Ok(seated) => Ok(seated.unseated.map(|u| (u.conn, u.peer_waiting))),
            Err(back) => {
                assert_eq!(back, name);
                Err(())
            }
        }
    }

    #[test]
    fn free_seats_are_taken_without_dropping_anyone() {
        let mut s = Seats::new(3);
        fill(&mut s, A, &["a0", "a1"]);
        assert_eq!(seat(&mut s, B, "b0"), Ok(None));
        assert_eq!(s.len, 3);
        assert_eq!((s.waiting(ip(A)), s.waiting(ip(B))), (2, 1));
    }

    #[test]
    fn with_every_seat_taken_by_one_peer_another_takes_its_oldest() {
        let mut s = Seats::new(4);
        fill(&mut s, A, &["a0", "a1", "a2", "a3"]);
        assert_eq!(seat(&mut s, B, "b0"), Ok(Some(("a0", 4))));
        assert_eq!(s.len, 4);
        assert_eq!((s.waiting(ip(A)), s.waiting(ip(B))), (3, 1));
        assert_eq!(seat(&mut s, B, "b1"), Ok(Some(("a1", 3))));
    }

    #[test]
    fn the_biggest_peer_is_refused_and_nothing_exceeds_the_capacity() {
        let mut s = Seats::new(4);
        fill(&mut s, A, &["a0", "a1", "a2", "a3"]);
        assert_eq!(seat(&mut s, A, "a4"), Err(()));
        assert_eq!(s.len, 4);
        assert_eq!(s.waiting(ip(A)), 4);
    }

    #[test]
    fn one_more_than_the_newcomer_would_have_is_not_enough() {
        let mut s = Seats::new(3);
        fill(&mut s, A, &["a0", "a1"]);
        fill(&mut s, B, &["b0"]);
        // B would have 2, A has 2: refused.
        assert_eq!(seat(&mut s, B, "b1"), Err(()));
        // C would have 1 against A's 2: A's oldest goes.
        assert_eq!(seat(&mut s, C, "c0"), Ok(Some(("a0", 2))));
        // Now 1 each: nobody takes anyone's seat.
        for peer in [A, B, C] {
            assert_eq!(seat(&mut s, peer, "x"), Err(()));
        }
    }

    #[test]
    fn two_peers_converge_to_equal_shares_without_ping_pong() {
        let mut s = Seats::new(6);
        fill(&mut s, A, &["a0", "a1", "a2", "a3", "a4", "a5"]);
        let mut unseated = Vec::new();
        while let Ok(Some((name, _))) = seat(&mut s, B, "b") {
            unseated.push(name);
        }
        assert_eq!(unseated, ["a0", "a1", "a2"]);
        assert_eq!((s.waiting(ip(A)), s.waiting(ip(B))), (3, 3));
        // The newcomer refused is not seated either.
        assert_eq!(s.len, 6);
        assert_eq!(seat(&mut s, A, "a6"), Err(()));
    }

    #[test]
    fn among_peers_tied_for_the_most_the_oldest_waiter_goes() {
        let mut s = Seats::new(4);
        fill(&mut s, B, &["b0"]);
        fill(&mut s, A, &["a0"]);
        fill(&mut s, A, &["a1"]);
        fill(&mut s, B, &["b1"]);
        assert_eq!(seat(&mut s, C, "c0"), Ok(Some(("b0", 2))));
        // A has 2 now, B 1: A's oldest for a fourth peer, which would
        // have 1 (C's next would have 2: no).
        assert_eq!(seat(&mut s, C, "c1"), Err(()));
        assert_eq!(seat(&mut s, "10.0.0.4", "d0"), Ok(Some(("a0", 2))));
    }

    #[test]
    fn leaving_frees_the_seat_and_an_unseated_one_is_gone() {
        let mut s = Seats::new(2);
        let a = fill(&mut s, A, &["a0", "a1"]);
        assert_eq!(seat(&mut s, B, "b0"), Ok(Some(("a0", 2))));
        // a0's own leave, later, finds nothing.
        assert_eq!(s.remove(a[0]), None);
        assert_eq!(s.len, 2);
        assert_eq!(s.remove(a[1]), Some("a1"));
        assert_eq!(s.len, 1);
        assert_eq!(s.waiting(ip(A)), 0);
        assert!(
            !s.peers.contains_key(&ip(A)),
            "a peer with none is forgotten"
        );
        assert_eq!(seat(&mut s, A, "a2"), Ok(None));
    }

    #[test]
    fn a_freed_slot_goes_to_the_oldest_waiter_of_the_peer_holding_the_fewest() {
        let mut s = Seats::new(8);
        fill(&mut s, A, &["a0", "a1", "a2"]);
        fill(&mut s, B, &["b0"]);
        fill(&mut s, C, &["c0"]);
        // None served yet. A holds 4 slots, B 1, C 1: B and C tie, B's
        // waiter is older.
        let held = |p: IpAddr| if p == ip(A) { 4 } else { 1 };
        assert_eq!(s.next_for_slot(held).map(|(_, c)| c), Some("b0"));
        assert_eq!(s.next_for_slot(held).map(|(_, c)| c), Some("c0"));
        // Only A waits now: its oldest, however many it holds.
        assert_eq!(s.next_for_slot(held).map(|(_, c)| c), Some("a0"));
        assert_eq!((s.len, s.waiting(ip(A))), (2, 2));
        let none_held = |_: IpAddr| 0;
        assert_eq!(s.next_for_slot(none_held).map(|(_, c)| c), Some("a1"));
        assert_eq!(s.next_for_slot(none_held).map(|(_, c)| c), Some("a2"));
        assert_eq!(s.next_for_slot(none_held), None);
        assert_eq!(s.len, 0);
    }

    #[test]
    fn peers_with_connections_waiting_take_turns_whatever_they_hold() {
        let mut s = Seats::new(8);
        fill(&mut s, A, &["a0", "a1", "a2"]);
        fill(&mut s, B, &["b0", "b1", "b2"]);
        // B holds more slots than A (a pool of connections), but takes
        // its turn.
        let held = |p: IpAddr| if p == ip(B) { 4 } else { 1 };
        let order: Vec<_> = std::iter::from_fn(|| s.next_for_slot(held).map(|(_, c)| c))
            .take(4)
            .collect();
        assert_eq!(order, ["a0", "b0", "a1", "b1"]);
        // A peer whose connections start waiting comes first.
        fill(&mut s, C, &["c0"]);
        assert_eq!(s.next_for_slot(held).map(|(_, c)| c), Some("c0"));
        assert_eq!(s.next_for_slot(held).map(|(_, c)| c), Some("a2"));
    }

    #[test]
    fn a_peer_re_opening_one_connection_as_it_is_served_takes_its_turn_too() {
        let mut s = Seats::new(8);
        fill(&mut s, A, &["a0"]);
        fill(&mut s, B, &["b0", "b1", "b2"]);
        let none_held = |_: IpAddr| 0;
        let mut order = Vec::new();
        let mut a_next = ["a1", "a2", "a3"].into_iter();
        while let Some((_, served)) = s.next_for_slot(none_held) {
            order.push(served);
            // A's queue empties each time its one connection is served: it
            // re-opens one at once.
            if served.starts_with('a')
                && let Some(next) = a_next.next()
            {
                fill(&mut s, A, &[next]);
            }
        }
        // Not a0, a1, a2, a3 ahead of B's whole queue.
        assert_eq!(order, ["a0", "b0", "a1", "b1", "a2", "b2", "a3"]);
    }

    #[test]
    fn the_last_slot_of_long_gone_peers_is_forgotten() {
        let mut s = Seats::new(1);
        let remembered = usize::try_from(s.remembered()).unwrap();
        for i in 0..remembered * 10 {
            let peer = IpAddr::from([10, 1, (i >> 8) as u8, i as u8]);
            s.seat(peer, "x").unwrap();
            s.next_for_slot(|_| 0).unwrap();
        }
        assert!(
            s.served.len() <= 2 * remembered + 1,
            "{} peers remembered, at most {} expected",
            s.served.len(),
            2 * remembered + 1
        );
        assert_eq!(s.len, 0);
    }

    #[test]
    fn no_seats_refuses_everyone() {
        let mut s = Seats::new(0);
        assert_eq!(seat(&mut s, A, "a0"), Err(()));
        assert_eq!(s.len, 0);
    }
}
