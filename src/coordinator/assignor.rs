//! Server-side assignors of the KIP-848 consumer group protocol (spec §6.9,
//! `group.consumer.assignors`): the coordinator, not a group leader, turns the members'
//! subscriptions and the topics' partition counts into a target assignment.
//!
//! Both assignors are pure functions of their input. Output never depends on `HashMap` iteration
//! order or on the order of the members slice: members are sorted by id (or by Kafka's range order)
//! and topics by id before anything is decided, so every replica of a coordinator partition, and a
//! coordinator replaying its log, computes the same target.
//!
//! - [`Assignor::Uniform`]: balanced and sticky. With identical subscriptions (the usual case) it is
//!   a quota algorithm: every member ends with ⌊P/M⌋ or ⌈P/M⌉ partitions and keeps as many of its
//!   current ones as that allows. With differing subscriptions it keeps every valid current
//!   partition, places the free ones on the least-loaded subscriber, then moves partitions from the
//!   most-loaded members to less-loaded subscribers until no single move reduces the imbalance.
//! - [`Assignor::Range`]: Kafka's range layout, contiguous per topic, which gives co-partitioning
//!   when subscriptions and partition counts are equal.
//!
//! Racks are ignored. Rack awareness needs the racks of each partition's replicas, which the input
//! (`topic id -> partition count`) does not carry; `MemberSpec::rack_id` is kept so a later
//! rack-aware variant can use it without changing callers. Clients do not check the algorithm, so
//! a rack-unaware balanced assignment is acceptable (spec §6.9).
//!
//! Cost: members are grouped by subscription before anything else, so work that depends on a
//! member's topic list is done once per distinct subscription, not once per member. With 1,000
//! members on 10,000 partitions (release build) range and homogeneous uniform take a few
//! milliseconds, heterogeneous uniform tens of milliseconds; see the
//! `thousand_members_ten_thousand_partitions` test, which prints the times.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

use uuid::Uuid;

/// Partitions of each topic, by topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// One member as an assignor sees it.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// Topics the member subscribes to (resolved to ids).
    pub topics: BTreeSet<Uuid>,
    /// The member's assignment in the previous target assignment (for stickiness).
    pub current: Assignment,
}

/// A server-side assignor (`group.consumer.assignors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    /// The name members put in `ServerAssignor` and operators in `group.consumer.assignors`.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// The assignor with this exact name. Case-sensitive, as Kafka's lookup is: a client asking for
    /// "Uniform" gets UNSUPPORTED_ASSIGNOR there too.
    pub fn from_name(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    /// Computes the target assignment: every member id of `members` appears in the result
    /// (possibly with an empty assignment); only partitions of topics in `partitions` (topic id ->
    /// partition count) that some member subscribes to are assigned, each to exactly one member
    /// subscribed to its topic.
    ///
    /// Member ids are expected to be unique (the group keys members by id); if one repeats, only
    /// its first occurrence in the slice is used. `current` partitions of topics missing from
    /// `partitions`, beyond the partition count, or of topics the member no longer subscribes to
    /// are ignored. A topic with a partition count ≤ 0 has no partitions.
    pub fn assign(self, members: &[MemberSpec], partitions: &HashMap<Uuid, i32>) -> HashMap<String, Assignment> {
        let group = Group::new(members, partitions);
        let assigned = match self {
            Assignor::Uniform => uniform(&group),
            Assignor::Range => range(&group),
        };
        group.members.iter().zip(assigned).map(|(m, a)| (m.member_id.clone(), a)).collect()
    }
}

// === input ===

/// The input, normalised once: members in a fixed order, topics that exist, and members grouped
/// into classes of equal effective subscription.
struct Group<'a> {
    /// Sorted by member id, first occurrence of each id. Every other member list is indexes into
    /// this one, so "lower index" means "lower member id" and is the tie-break everywhere.
    members: Vec<&'a MemberSpec>,
    /// Partition counts of topics that exist and have partitions, sorted by topic id.
    counts: BTreeMap<Uuid, i32>,
    /// Distinct effective subscriptions (subscribed topics that exist), numbered in order of their
    /// first member. Subscribing to a topic that does not exist makes no difference to what a
    /// member can be given, so such members share a class with those that do not.
    classes: Vec<BTreeSet<Uuid>>,
    class_of: Vec<usize>,
}

impl<'a> Group<'a> {
    fn new(members: &'a [MemberSpec], partitions: &HashMap<Uuid, i32>) -> Self {
        let counts: BTreeMap<Uuid, i32> = partitions.iter().filter(|(_, &n)| n > 0).map(|(&t, &n)| (t, n)).collect();

        // A stable sort keeps the first of duplicated ids first for dedup.
        let mut sorted: Vec<&MemberSpec> = members.iter().collect();
        sorted.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        sorted.dedup_by(|later, earlier| later.member_id == earlier.member_id);

        // Group by raw subscription first, so each distinct topic list is filtered only once.
        let mut by_raw: BTreeMap<&BTreeSet<Uuid>, usize> = BTreeMap::new();
        let mut by_effective: BTreeMap<BTreeSet<Uuid>, usize> = BTreeMap::new();
        let mut classes = Vec::new();
        let class_of = sorted
            .iter()
            .map(|m| {
                *by_raw.entry(&m.topics).or_insert_with(|| {
                    let effective: BTreeSet<Uuid> = m.topics.iter().filter(|t| counts.contains_key(t)).copied().collect();
                    *by_effective.entry(effective).or_insert_with_key(|e| {
                        classes.push(e.clone());
                        classes.len() - 1
                    })
                })
            })
            .collect();
        Group { members: sorted, counts, classes, class_of }
    }

    /// The effective subscription of member `m`.
    fn subs(&self, m: usize) -> &BTreeSet<Uuid> {
        &self.classes[self.class_of[m]]
    }

    /// Per subscribed topic, the classes subscribing to it (ascending).
    fn topic_classes(&self) -> BTreeMap<Uuid, Vec<usize>> {
        let mut out: BTreeMap<Uuid, Vec<usize>> = BTreeMap::new();
        for (c, topics) in self.classes.iter().enumerate() {
            for &t in topics {
                out.entry(t).or_default().push(c);
            }
        }
        out
    }

    /// The still-valid part of member `m`'s current assignment, in (topic, partition) order:
    /// partitions of topics it subscribes to that exist, below the topic's partition count.
    fn valid_current(&self, m: usize) -> impl Iterator<Item = (Uuid, i32)> + '_ {
        let subs = self.subs(m);
        self.members[m].current.iter().filter(|(t, _)| subs.contains(t)).flat_map(move |(&t, ps)| {
            let n = self.counts[&t];
            ps.range(0..n).map(move |&p| (t, p))
        })
    }
}

/// Which partitions are taken so far; used to drop a partition claimed twice in `current` (first
/// claimant in member-id order wins) and to find the free ones.
struct Owners(HashMap<Uuid, Vec<bool>>);

impl Owners {
    /// All partitions of `topics` free.
    fn new<'t>(topics: impl Iterator<Item = &'t Uuid>, counts: &BTreeMap<Uuid, i32>) -> Self {
        Owners(topics.map(|&t| (t, vec![false; counts[&t] as usize])).collect())
    }

    fn is_owned(&self, t: Uuid, p: i32) -> bool {
        self.0[&t][p as usize]
    }

    fn claim(&mut self, t: Uuid, p: i32) {
        if let Some(slot) = self.0.get_mut(&t) {
            slot[p as usize] = true;
        }
    }

    /// Unowned partitions of one topic, ascending.
    fn free(&self, t: Uuid) -> impl Iterator<Item = i32> + '_ {
        self.0[&t].iter().enumerate().filter(|(_, &owned)| !owned).map(|(p, _)| p as i32)
    }
}

// === uniform ===

/// The uniform assignor; returns assignments aligned with `group.members`.
fn uniform(group: &Group<'_>) -> Vec<Assignment> {
    let mut result = vec![Assignment::new(); group.members.len()];
    // Members that can get nothing take no part: they would otherwise count towards the quota
    // and make a homogeneous group look heterogeneous.
    let active: Vec<usize> = (0..group.members.len()).filter(|&m| !group.subs(m).is_empty()).collect();
    let Some(&first) = active.first() else {
        return result;
    };
    let assigned = if active.iter().all(|&m| group.class_of[m] == group.class_of[first]) {
        homogeneous(group, &active, group.subs(first))
    } else {
        heterogeneous(group, &active, None)
    };
    for (m, a) in active.into_iter().zip(assigned) {
        result[m] = a;
    }
    result
}

/// Uniform with one shared subscription: quotas ⌊P/M⌋ and, for P mod M members, one more.
///
/// Members first keep their valid current partitions up to their quota; the extra slots go to
/// members that already hold more than ⌊P/M⌋ (so on a join only the surplus moves, on a leave only
/// the leaver's partitions move). The freed partitions are then dealt round-robin to the members
/// below quota, which spreads each topic over many members rather than giving one member a block
/// of one topic.
fn homogeneous(group: &Group<'_>, active: &[usize], topics: &BTreeSet<Uuid>) -> Vec<Assignment> {
    let total: usize = topics.iter().map(|t| group.counts[t] as usize).sum();
    let min_quota = total / active.len();
    let mut extras = total % active.len();
    let mut owners = Owners::new(topics.iter(), &group.counts);
    let mut out = vec![Assignment::new(); active.len()];
    let mut quota = vec![min_quota; active.len()];

    for (k, &m) in active.iter().enumerate() {
        let retained: Vec<(Uuid, i32)> = group.valid_current(m).filter(|&(t, p)| !owners.is_owned(t, p)).collect();
        if retained.len() > min_quota && extras > 0 {
            extras -= 1;
            quota[k] += 1;
        }
        // Anything beyond the quota is released; a later member that also lists it may keep it.
        for &(t, p) in retained.iter().take(quota[k]) {
            owners.claim(t, p);
            out[k].entry(t).or_default().insert(p);
        }
    }
    // Extra slots nobody's current assignment used go to the first members at ⌊P/M⌋.
    for q in quota.iter_mut() {
        if extras == 0 {
            break;
        }
        if *q == min_quota {
            *q += 1;
            extras -= 1;
        }
    }

    let mut needy: VecDeque<(usize, usize)> =
        out.iter().enumerate().map(|(k, a)| (k, quota[k] - load(a))).filter(|&(_, deficit)| deficit > 0).collect();
    for &t in topics {
        for p in owners.free(t) {
            let Some((k, deficit)) = needy.pop_front() else {
                unreachable!("the quotas add up to the partition count");
            };
            out[k].entry(t).or_default().insert(p);
            if deficit > 1 {
                needy.push_back((k, deficit - 1));
            }
        }
    }
    out
}

fn load(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

/// Uniform with differing subscriptions. See [`Balancer`].
fn heterogeneous(group: &Group<'_>, active: &[usize], wiring: Option<Wiring>) -> Vec<Assignment> {
    let topic_classes = group.topic_classes();
    let mut owners = Owners::new(topic_classes.keys(), &group.counts);

    // 1. Keep every valid current partition; balancing below decides what must move.
    let mut kept = vec![Assignment::new(); active.len()];
    for (k, &m) in active.iter().enumerate() {
        for (t, p) in group.valid_current(m) {
            if !owners.is_owned(t, p) {
                owners.claim(t, p);
                kept[k].entry(t).or_default().insert(p);
            }
        }
    }
    let mut b = Balancer::new(group, active, &topic_classes, kept, wiring);

    // 2. Place free partitions on the least-loaded subscriber, topics with the fewest subscribers
    //    first: they have the fewest choices, so they should not find their subscribers already
    //    loaded by topics that could have gone elsewhere.
    let mut class_size = vec![0usize; group.classes.len()];
    for &m in active {
        class_size[group.class_of[m]] += 1;
    }
    let mut topics: Vec<(usize, Uuid)> = topic_classes.iter().map(|(&t, cs)| (cs.iter().map(|&c| class_size[c]).sum(), t)).collect();
    topics.sort_unstable();
    for (_, t) in topics {
        b.place(t, owners.free(t));
    }

    // 3. Converge.
    b.balance();
    b.kept.into_iter().zip(b.fresh).map(|(kept, fresh)| merge(kept, fresh)).collect()
}

fn merge(mut a: Assignment, b: Assignment) -> Assignment {
    for (t, ps) in b {
        a.entry(t).or_default().extend(ps);
    }
    a
}

/// The heterogeneous uniform assignment while it is being balanced. Members are indexes into the
/// active members (in member-id order, the tie-break everywhere).
///
/// Balanced means: for every partition of topic t owned by a, every subscriber b of t has
/// `load(b) + 1 >= load(a)` — no single move reduces the imbalance. Each improving move lowers the
/// sum of squared loads by at least 2, so balancing terminates.
///
/// The hot question is "the least-loaded subscriber of topic t", asked once per placement and
/// per considered move, while loads change once per placement or move. Members are kept in
/// buckets ordered by (load, member), wired one of two ways, whichever [`cheaper_wiring`]
/// estimates to be cheaper for the group:
///
/// - by topic class (topics with the same subscribers share a bucket of those subscribers): a
///   query reads one bucket, a load change updates every bucket the member is in. Cheap when the
///   topics are subscribed in few patterns, such as 10 topics subscribed in arbitrary
///   combinations, or thousands of topics during a subscription rollout.
/// - by member class (members with the same subscription share a bucket): a load change updates
///   one bucket, a query reads the bucket of every class subscribing to t. Cheap when members
///   subscribe in few patterns but the topics do not fall into few classes.
///
/// Neither is cheap when there are both many distinct subscriptions and many distinct subscriber
/// sets (1,000 members each with its own random half of 1,000 topics: about 0.35 s in a release
/// build); that stays correct, only slower.
struct Balancer {
    /// Partitions kept from the member's current assignment: moving them makes a consumer revoke.
    kept: Vec<Assignment>,
    /// Partitions placed in this computation: moved first, since nobody consumes them yet.
    fresh: Vec<Assignment>,
    load: Vec<usize>,
    /// Each bucket: members as (load, member), the least loaded first.
    buckets: Vec<BTreeSet<(usize, usize)>>,
    /// The buckets a member is in.
    member_buckets: Vec<Vec<usize>>,
    /// The buckets whose union is the subscribers of a topic.
    topic_buckets: BTreeMap<Uuid, Vec<usize>>,
}

/// How [`Balancer`] buckets are wired. Both give the same answers, hence the same assignment;
/// they differ only in cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wiring {
    ByTopicClass,
    ByMemberClass,
}

/// A rough count of the work each wiring does, from the shape of the group. Placing or moving a
/// partition updates the receiver's load (a move also the giver's); every time a member is
/// considered for a move, the least-loaded subscriber of each topic it owns is read.
fn cheaper_wiring(
    group: &Group<'_>,
    active: &[usize],
    topic_classes: &BTreeMap<Uuid, Vec<usize>>,
    class_buckets: &[Vec<usize>],
    load: &[usize],
) -> Wiring {
    // A bucket update (remove + insert) costs tens of head reads (measured in release builds).
    const UPDATE: u64 = 32;
    let n = active.len() as u64;
    let total: u64 = topic_classes.keys().map(|t| group.counts[t] as u64).sum();
    let ceil = total.div_ceil(n);
    // Partitions above the fair share must move, each costing a consideration and two updates.
    let surplus: u64 = load.iter().map(|&l| (l as u64).saturating_sub(ceil)).sum();
    let free = total - load.iter().sum::<usize>() as u64;
    let (considered, updates) = (n + surplus, free + 2 * surplus);
    let subscribed: u64 = active.iter().map(|&m| group.subs(m).len() as u64).sum();
    let topics_read = (subscribed / n).clamp(1, ceil + 1);
    let member_class_links: u64 = topic_classes.values().map(|cs| cs.len() as u64).sum();
    let read_by_member_class = member_class_links / topic_classes.len().max(1) as u64;
    let update_by_topic_class: u64 = active.iter().map(|&m| class_buckets[group.class_of[m]].len() as u64).sum::<u64>() / n;

    let by_member = member_class_links + considered * topics_read * read_by_member_class + updates * UPDATE;
    let by_topic = considered * topics_read + updates * UPDATE * update_by_topic_class;
    if by_topic <= by_member {
        Wiring::ByTopicClass
    } else {
        Wiring::ByMemberClass
    }
}

// === impl Balancer ===

impl Balancer {
    /// `topic_classes`: [`Group::topic_classes`]; `kept[k]`: what `active[k]` keeps of its current
    /// assignment (its starting load); `wiring`: `None` to pick the cheaper.
    fn new(
        group: &Group<'_>,
        active: &[usize],
        topic_classes: &BTreeMap<Uuid, Vec<usize>>,
        kept: Vec<Assignment>,
        wiring: Option<Wiring>,
    ) -> Self {
        // Topic classes: topics subscribed by the same member classes share an id.
        let mut ids: BTreeMap<&[usize], usize> = BTreeMap::new();
        let topic_class: BTreeMap<Uuid, usize> = topic_classes
            .iter()
            .map(|(&t, cs)| {
                let next = ids.len();
                (t, *ids.entry(cs.as_slice()).or_insert(next))
            })
            .collect();
        // Per member class, the topic classes its topics fall into.
        let class_buckets: Vec<Vec<usize>> = group
            .classes
            .iter()
            .map(|topics| topics.iter().map(|t| topic_class[t]).collect::<BTreeSet<_>>().into_iter().collect())
            .collect();

        let load: Vec<usize> = kept.iter().map(load).collect();
        let wiring = wiring.unwrap_or_else(|| cheaper_wiring(group, active, topic_classes, &class_buckets, &load));

        let (member_buckets, topic_buckets, n_buckets): (Vec<Vec<usize>>, BTreeMap<Uuid, Vec<usize>>, usize) =
            if wiring == Wiring::ByTopicClass {
                let members = active.iter().map(|&m| class_buckets[group.class_of[m]].clone()).collect();
                let topics = topic_class.iter().map(|(&t, &c)| (t, vec![c])).collect();
                (members, topics, ids.len())
            } else {
                let members = active.iter().map(|&m| vec![group.class_of[m]]).collect();
                (members, topic_classes.clone(), group.classes.len())
            };

        let mut buckets = vec![BTreeSet::new(); n_buckets];
        for (m, bs) in member_buckets.iter().enumerate() {
            for &b in bs {
                buckets[b].insert((load[m], m));
            }
        }
        Balancer { fresh: vec![Assignment::new(); kept.len()], kept, load, buckets, member_buckets, topic_buckets }
    }

    /// (load, member) of the least-loaded subscriber of `t`, lowest member index on ties.
    fn least_loaded(&self, t: Uuid) -> Option<(usize, usize)> {
        self.topic_buckets.get(&t)?.iter().filter_map(|&b| self.buckets[b].first().copied()).min()
    }

    fn set_load(&mut self, m: usize, load: usize) {
        for &b in &self.member_buckets[m] {
            self.buckets[b].remove(&(self.load[m], m));
            self.buckets[b].insert((load, m));
        }
        self.load[m] = load;
    }

    fn give(&mut self, m: usize, t: Uuid, p: i32) {
        self.fresh[m].entry(t).or_default().insert(p);
        self.set_load(m, self.load[m] + 1);
    }

    /// Gives each of `partitions` (of topic `t`) to the least-loaded subscriber at that moment.
    ///
    /// The same as calling [`Self::least_loaded`] before each [`Self::give`], but it reads each
    /// bucket once per topic instead of once per partition: a heap holds the head of each bucket
    /// that subscribes to `t`, and only the bucket that changed is looked at again.
    fn place(&mut self, t: Uuid, partitions: impl Iterator<Item = i32>) {
        let Some(topic_buckets) = self.topic_buckets.get(&t) else { return };
        let mut heads: BinaryHeap<Reverse<(usize, usize, usize)>> =
            topic_buckets.iter().filter_map(|&b| self.buckets[b].first().map(|&(load, m)| Reverse((load, m, b)))).collect();
        // The heap holds one entry per bucket. An entry goes stale if its member's load changed
        // through another bucket of the same topic (neither wiring does that, but it costs one
        // comparison to be sure); a stale entry is replaced by the bucket's real head.
        for p in partitions {
            let (m, b) = loop {
                let Reverse((load, m, b)) = heads.pop().expect("a subscribed topic has a subscriber");
                let head = *self.buckets[b].first().expect("buckets never empty");
                if head == (load, m) {
                    break (m, b);
                }
                heads.push(Reverse((head.0, head.1, b)));
            };
            self.give(m, t, p);
            let head = *self.buckets[b].first().expect("buckets never empty");
            heads.push(Reverse((head.0, head.1, b)));
        }
    }

    /// Removes one partition of `t` from `m`, a fresh one if it has any.
    fn take(&mut self, m: usize, t: Uuid) -> i32 {
        let p = [&mut self.fresh[m], &mut self.kept[m]]
            .into_iter()
            .find_map(|a| {
                let ps = a.get_mut(&t)?;
                let p = ps.pop_last();
                if ps.is_empty() {
                    a.remove(&t);
                }
                p
            })
            .expect("take is only called for a topic the member owns");
        self.set_load(m, self.load[m] - 1);
        p
    }

    /// The improving move from `a` to the least-loaded receiver, if any: (topic, receiver).
    /// Among equally good receivers, prefer a topic of which `a` has fresh partitions.
    fn best_move(&self, a: usize) -> Option<(Uuid, usize)> {
        // A topic in both maps is looked at twice, which is harmless: the key decides.
        self.fresh[a]
            .keys()
            .map(|&t| (t, true))
            .chain(self.kept[a].keys().map(|&t| (t, self.fresh[a].contains_key(&t))))
            .filter_map(|(t, has_fresh)| {
                let (load, b) = self.least_loaded(t)?;
                (load + 1 < self.load[a]).then_some((load, b, !has_fresh, t))
            })
            .min()
            .map(|(_, b, _, t)| (t, b))
    }

    /// Moves partitions, one at a time, from the most-loaded member that has an improving move
    /// to the least-loaded subscriber, until no member has one. Always taking from the top keeps
    /// churn low: on a join the surplus comes from the fullest members, one partition each, rather
    /// than draining one member and refilling it from the others.
    fn balance(&mut self) {
        let mut queue: BTreeSet<(Reverse<usize>, usize)> = (0..self.load.len()).map(|m| (Reverse(self.load[m]), m)).collect();
        loop {
            while let Some((_, a)) = queue.pop_first() {
                // A member with no move now is dropped; it comes back if it receives a partition
                // (below) or if the final check finds that another member's loss gave it one.
                let Some((t, b)) = self.best_move(a) else { continue };
                let p = self.take(a, t);
                queue.remove(&(Reverse(self.load[b]), b));
                self.give(b, t, p);
                queue.insert((Reverse(self.load[a]), a));
                queue.insert((Reverse(self.load[b]), b));
            }
            queue.extend((0..self.load.len()).filter(|&m| self.best_move(m).is_some()).map(|m| (Reverse(self.load[m]), m)));
            if queue.is_empty() {
                return;
            }
        }
    }
}

// === range ===

/// Kafka's range layout: for each topic, its subscribers in range order (static members by
/// instance id, then dynamic members by member id) get contiguous ranges of ⌊P/M⌋ partitions, the
/// first P mod M one more. Not sticky on purpose: range users rely on co-partitioning (member i
/// gets the same partition indexes of every equally sized topic), and any stickiness that broke
/// the contiguous layout would break that.
fn range(group: &Group<'_>) -> Vec<Assignment> {
    let members = &group.members;
    let mut order: Vec<usize> = (0..members.len()).collect();
    // Members are already sorted by member id, which breaks ties between equal instance ids.
    order.sort_by(|&a, &b| match (&members[a].instance_id, &members[b].instance_id) {
        (Some(x), Some(y)) => x.cmp(y).then(a.cmp(&b)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(&b),
    });

    // Topics subscribed by the same classes have the same subscribers: build that list once.
    let mut subscribers: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    let mut out = vec![Assignment::new(); members.len()];
    for (t, classes) in group.topic_classes() {
        let list = subscribers.entry(classes).or_insert_with_key(|classes| {
            let mut wanted = vec![false; group.classes.len()];
            for &c in classes {
                wanted[c] = true;
            }
            order.iter().copied().filter(|&m| wanted[group.class_of[m]]).collect()
        });
        let n = group.counts[&t];
        let m = list.len() as i32;
        let (quota, extra) = (n / m, n % m);
        let mut start = 0;
        for (k, &i) in list.iter().enumerate() {
            let len = quota + i32::from((k as i32) < extra);
            if len > 0 {
                out[i].insert(t, (start..start + len).collect());
            }
            start += len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// SplitMix64: a seeded generator for test inputs, so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn shuffle<T>(&mut self, v: &mut [T]) {
            for i in (1..v.len()).rev() {
                v.swap(i, self.below(i + 1));
            }
        }
    }

    fn topic(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn member(id: &str, topics: &[Uuid]) -> MemberSpec {
        MemberSpec {
            member_id: id.to_string(),
            instance_id: None,
            rack_id: None,
            topics: topics.iter().copied().collect(),
            current: Assignment::new(),
        }
    }

    /// `n` members "m000".. subscribed to `topics`.
    fn members(n: usize, topics: &[Uuid]) -> Vec<MemberSpec> {
        (0..n).map(|i| member(&format!("m{i:04}"), topics)).collect()
    }

    /// Feeds a result back as the members' `current`, as the coordinator does between epochs.
    fn with_current(mut ms: Vec<MemberSpec>, result: &HashMap<String, Assignment>) -> Vec<MemberSpec> {
        for m in &mut ms {
            m.current = result.get(&m.member_id).cloned().unwrap_or_default();
        }
        ms
    }

    /// (topic, partition) -> owner.
    fn owners(result: &HashMap<String, Assignment>) -> BTreeMap<(Uuid, i32), String> {
        let mut out = BTreeMap::new();
        for (m, a) in result {
            for (&t, ps) in a {
                for &p in ps {
                    assert!(out.insert((t, p), m.clone()).is_none(), "{t}/{p} assigned twice");
                }
            }
        }
        out
    }

    fn moved(before: &HashMap<String, Assignment>, after: &HashMap<String, Assignment>) -> usize {
        let (before, after) = (owners(before), owners(after));
        after.iter().filter(|(tp, m)| before.get(tp).is_some_and(|old| old != *m)).count()
    }

    /// The contract of `assign`: every member present, every partition of a subscribed topic
    /// assigned exactly once, only to a subscriber, and nothing else assigned.
    fn check_valid(ms: &[MemberSpec], partitions: &HashMap<Uuid, i32>, result: &HashMap<String, Assignment>) {
        let ids: BTreeSet<&String> = ms.iter().map(|m| &m.member_id).collect();
        assert_eq!(result.keys().collect::<BTreeSet<_>>(), ids, "result members");
        let subs: HashMap<&String, &BTreeSet<Uuid>> = ms.iter().map(|m| (&m.member_id, &m.topics)).collect();
        let owned = owners(result);
        for ((t, p), m) in &owned {
            assert!(subs[m].contains(t), "{m} got {t}/{p} without subscribing");
            assert!(*p >= 0 && *p < partitions[t], "{t}/{p} does not exist");
        }
        for a in result.values() {
            assert!(a.values().all(|ps| !ps.is_empty()), "empty topic entry in {a:?}");
        }
        let wanted: usize =
            partitions.iter().filter(|(t, _)| ms.iter().any(|m| m.topics.contains(t))).map(|(_, &n)| n.max(0) as usize).sum();
        assert_eq!(owned.len(), wanted, "every subscribed partition assigned");
    }

    fn spread(result: &HashMap<String, Assignment>) -> (usize, usize) {
        let loads: Vec<usize> = result.values().map(load).collect();
        (*loads.iter().min().unwrap(), *loads.iter().max().unwrap())
    }

    /// The heterogeneous balance condition: for every partition owned by a, every subscriber b of
    /// its topic has load(b) + 1 >= load(a).
    fn check_converged(ms: &[MemberSpec], result: &HashMap<String, Assignment>) {
        let mut least: HashMap<Uuid, (usize, &str)> = HashMap::new();
        for m in ms {
            let l = load(&result[&m.member_id]);
            for &t in &m.topics {
                let e = least.entry(t).or_insert((l, &m.member_id));
                if l < e.0 {
                    *e = (l, &m.member_id);
                }
            }
        }
        for (a, assignment) in result {
            let la = load(assignment);
            for t in assignment.keys() {
                let (lb, b) = least[t];
                assert!(lb + 1 >= la, "{a} (load {la}) owns {t} but subscriber {b} has load {lb}");
            }
        }
    }

    /// Three topics of 20 partitions.
    fn sixty() -> (Vec<Uuid>, HashMap<Uuid, i32>) {
        let ts = vec![topic(1), topic(2), topic(3)];
        let parts = ts.iter().map(|&t| (t, 20)).collect();
        (ts, parts)
    }

    #[test]
    fn names() {
        for a in [Assignor::Uniform, Assignor::Range] {
            assert_eq!(Assignor::from_name(a.name()), Some(a));
        }
        assert_eq!(Assignor::Uniform.name(), "uniform");
        assert_eq!(Assignor::Range.name(), "range");
        assert_eq!(Assignor::from_name("Uniform"), None);
        assert_eq!(Assignor::from_name("RANGE"), None);
        assert_eq!(Assignor::from_name("sticky"), None);
        assert_eq!(Assignor::from_name(""), None);
    }

    #[test]
    fn uniform_homogeneous_is_balanced() {
        let ts = [topic(1), topic(2)];
        for (m, p1, p2) in [(1, 1, 0), (3, 7, 5), (4, 4, 4), (5, 2, 1), (7, 100, 3), (10, 0, 0), (16, 33, 31)] {
            let parts = HashMap::from([(ts[0], p1), (ts[1], p2)]);
            let ms = members(m, &ts);
            let r = Assignor::Uniform.assign(&ms, &parts);
            check_valid(&ms, &parts, &r);
            let (lo, hi) = spread(&r);
            assert!(hi - lo <= 1, "{m} members on {p1}+{p2}: loads {lo}..{hi}");
            // Still balanced after a rebalance from a sticky start.
            let ms = with_current(members(m + 1, &ts), &r);
            let r = Assignor::Uniform.assign(&ms, &parts);
            check_valid(&ms, &parts, &r);
            let (lo, hi) = spread(&r);
            assert!(hi - lo <= 1, "{} members on {p1}+{p2}: loads {lo}..{hi}", m + 1);
        }
    }

    #[test]
    fn uniform_homogeneous_spreads_topics() {
        // Fresh partitions are dealt round-robin: 4 members on 2 × 4 partitions get 1 of each topic.
        let ts = [topic(1), topic(2)];
        let parts = HashMap::from([(ts[0], 4), (ts[1], 4)]);
        let r = Assignor::Uniform.assign(&members(4, &ts), &parts);
        for a in r.values() {
            assert_eq!(a.len(), 2, "{a:?}");
        }
    }

    #[test]
    fn uniform_homogeneous_rebalance_from_unbalanced_start() {
        // One member held everything; nine join. Balanced, and the old member keeps its share.
        let (ts, parts) = sixty();
        let first = Assignor::Uniform.assign(&members(1, &ts), &parts);
        let ms = with_current(members(10, &ts), &first);
        let r = Assignor::Uniform.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        assert_eq!(spread(&r), (6, 6));
        assert_eq!(moved(&first, &r), 54);
    }

    #[test]
    fn uniform_homogeneous_join_and_leave_move_the_minimum() {
        let (ts, parts) = sixty();
        let base_members = members(10, &ts);
        let base = Assignor::Uniform.assign(&base_members, &parts);
        assert_eq!(spread(&base), (6, 6));

        // Join: 60 over 11 is 5 or 6; the newcomer needs 5, and only those 5 move.
        let mut ms = with_current(base_members.clone(), &base);
        ms.push(member("new", &ts));
        let joined = Assignor::Uniform.assign(&ms, &parts);
        check_valid(&ms, &parts, &joined);
        let (lo, hi) = spread(&joined);
        assert!(hi - lo <= 1);
        assert_eq!(moved(&base, &joined), 5);
        assert_eq!(load(&joined["new"]), 5);

        // Leave: only the leaver's 6 partitions move.
        let leaver = "m0003";
        let ms: Vec<MemberSpec> = with_current(base_members, &base).into_iter().filter(|m| m.member_id != leaver).collect();
        let left = Assignor::Uniform.assign(&ms, &parts);
        check_valid(&ms, &parts, &left);
        assert_eq!(spread(&left), (6, 7));
        for m in &ms {
            for (t, ps) in &base[&m.member_id] {
                assert!(ps.is_subset(&left[&m.member_id][t]), "{} lost a partition", m.member_id);
            }
        }
        let before = owners(&base);
        let after = owners(&left);
        let changed: Vec<_> = after.iter().filter(|(tp, m)| &before[*tp] != *m).collect();
        assert_eq!(changed.len(), 6);
        assert!(changed.iter().all(|(tp, _)| before[*tp] == leaver));

        // Same input again: nothing moves.
        let again = Assignor::Uniform.assign(&with_current(ms, &left), &parts);
        assert_eq!(again, left);
    }

    #[test]
    fn uniform_heterogeneous_is_valid_and_converged() {
        let mut rng = Rng(7);
        for round in 0..40 {
            let tcount = 1 + rng.below(6);
            let ts: Vec<Uuid> = (0..tcount as u128).map(|i| topic(i + 1)).collect();
            let parts: HashMap<Uuid, i32> = ts.iter().map(|&t| (t, rng.below(25) as i32)).collect();
            let mut ms: Vec<MemberSpec> = (0..1 + rng.below(12))
                .map(|i| {
                    let sub: Vec<Uuid> = ts.iter().copied().filter(|_| rng.below(2) == 0).collect();
                    member(&format!("m{i}"), &sub)
                })
                .collect();
            let r = Assignor::Uniform.assign(&ms, &parts);
            check_valid(&ms, &parts, &r);
            check_converged(&ms, &r);

            // Churn: drop a member, add one, change a subscription; still valid and converged.
            ms = with_current(ms, &r);
            if ms.len() > 1 {
                ms.remove(rng.below(ms.len()));
            }
            let sub: Vec<Uuid> = ts.iter().copied().filter(|_| rng.below(2) == 0).collect();
            ms.push(member(&format!("joined{round}"), &sub));
            let k = rng.below(ms.len());
            ms[k].topics = ts.iter().copied().filter(|_| rng.below(2) == 0).collect();
            let r = Assignor::Uniform.assign(&ms, &parts);
            check_valid(&ms, &parts, &r);
            check_converged(&ms, &r);
        }
    }

    #[test]
    fn uniform_heterogeneous_balances_within_subscriptions() {
        // a, b subscribe to t1 (10 partitions); c subscribes to t1 and t2 (2 partitions).
        // Best possible: c takes t2's 2 and 2 of t1, a and b 4 each.
        let (t1, t2) = (topic(1), topic(2));
        let parts = HashMap::from([(t1, 10), (t2, 2)]);
        let ms = vec![member("a", &[t1]), member("b", &[t1]), member("c", &[t1, t2])];
        let r = Assignor::Uniform.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        check_converged(&ms, &r);
        assert_eq!(spread(&r), (4, 4));
        assert_eq!(r["c"][&t2].len(), 2);
    }

    #[test]
    fn uniform_heterogeneous_join_moves_only_to_the_newcomer() {
        // Ten members on t1+t2 (60 partitions); a newcomer subscribes to t1 only.
        let (t1, t2) = (topic(1), topic(2));
        let parts = HashMap::from([(t1, 30), (t2, 30)]);
        let base_members = members(10, &[t1, t2]);
        let base = Assignor::Uniform.assign(&base_members, &parts);
        let mut ms = with_current(base_members, &base);
        ms.push(member("new", &[t1]));
        let r = Assignor::Uniform.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        check_converged(&ms, &r);
        assert_eq!(load(&r["new"]), 5);
        assert_eq!(moved(&base, &r), 5, "only the newcomer's partitions move");

        // And the heterogeneous path keeps a stable input stable.
        let again = Assignor::Uniform.assign(&with_current(ms, &r), &parts);
        assert_eq!(again, r);
    }

    #[test]
    fn uniform_heterogeneous_leave_moves_only_the_leavers_partitions() {
        let (t1, t2) = (topic(1), topic(2));
        let parts = HashMap::from([(t1, 30), (t2, 30)]);
        let mut ms = members(9, &[t1, t2]);
        ms.push(member("only-t1", &[t1]));
        let base = Assignor::Uniform.assign(&ms, &parts);
        check_converged(&ms, &base);
        let ms: Vec<MemberSpec> = with_current(ms, &base).into_iter().filter(|m| m.member_id != "m0002").collect();
        let r = Assignor::Uniform.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        check_converged(&ms, &r);
        let (before, after) = (owners(&base), owners(&r));
        for (tp, m) in &after {
            if &before[tp] != m {
                assert_eq!(before[tp], "m0002", "{tp:?} moved from {} to {m}", before[tp]);
            }
        }
    }

    #[test]
    fn range_is_contiguous_and_co_partitioned() {
        let (t1, t2) = (topic(1), topic(2));
        let parts = HashMap::from([(t1, 7), (t2, 7)]);
        let ms = members(3, &[t1, t2]);
        let r = Assignor::Range.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        let expect = [vec![0, 1, 2], vec![3, 4], vec![5, 6]];
        for (m, e) in ms.iter().zip(&expect) {
            let e: BTreeSet<i32> = e.iter().copied().collect();
            assert_eq!(r[&m.member_id], Assignment::from([(t1, e.clone()), (t2, e)]));
        }

        // More members than partitions: the first P get one each, the rest nothing.
        let parts = HashMap::from([(t1, 2)]);
        let ms = members(4, &[t1]);
        let r = Assignor::Range.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        assert_eq!(r["m0000"][&t1], BTreeSet::from([0]));
        assert_eq!(r["m0001"][&t1], BTreeSet::from([1]));
        assert!(r["m0002"].is_empty() && r["m0003"].is_empty());
    }

    #[test]
    fn range_orders_static_members_first() {
        let t1 = topic(1);
        let parts = HashMap::from([(t1, 8)]);
        let mut ms = vec![member("a", &[t1]), member("b", &[t1]), member("c", &[t1]), member("d", &[t1])];
        ms[3].instance_id = Some("i1".into()); // d
        ms[1].instance_id = Some("i2".into()); // b
        let r = Assignor::Range.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        assert_eq!(r["d"][&t1], BTreeSet::from([0, 1]));
        assert_eq!(r["b"][&t1], BTreeSet::from([2, 3]));
        assert_eq!(r["a"][&t1], BTreeSet::from([4, 5]));
        assert_eq!(r["c"][&t1], BTreeSet::from([6, 7]));
    }

    #[test]
    fn range_heterogeneous_uses_each_topics_subscribers() {
        let (t1, t2) = (topic(1), topic(2));
        let parts = HashMap::from([(t1, 4), (t2, 3)]);
        let ms = vec![member("a", &[t1, t2]), member("b", &[t1]), member("c", &[t2])];
        let r = Assignor::Range.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        assert_eq!(r["a"], Assignment::from([(t1, BTreeSet::from([0, 1])), (t2, BTreeSet::from([0, 1]))]));
        assert_eq!(r["b"], Assignment::from([(t1, BTreeSet::from([2, 3]))]));
        assert_eq!(r["c"], Assignment::from([(t2, BTreeSet::from([2]))]));
        // Range ignores `current`: the layout is the same from any starting point.
        let shuffled = with_current(ms.clone(), &HashMap::from([("a".to_string(), r["c"].clone())]));
        assert_eq!(Assignor::Range.assign(&shuffled, &parts), r);
    }

    #[test]
    fn output_does_not_depend_on_input_order() {
        let mut rng = Rng(42);
        let ts: Vec<Uuid> = (1..=5).map(topic).collect();
        let parts: Vec<(Uuid, i32)> = ts.iter().map(|&t| (t, 3 + rng.below(20) as i32)).collect();
        let homo = members(9, &ts);
        let mut hetero: Vec<MemberSpec> =
            (0..9).map(|i| member(&format!("h{i:04}"), &ts.iter().copied().filter(|_| rng.below(2) == 0).collect::<Vec<_>>())).collect();
        hetero[4].instance_id = Some("static".into());
        let homo_r = Assignor::Uniform.assign(&homo, &parts.iter().copied().collect());
        let hetero_r = Assignor::Uniform.assign(&hetero, &parts.iter().copied().collect());
        let mut inputs = vec![homo.clone(), hetero.clone()];
        // With a messy, partly overlapping `current` too.
        // Every partition claimed twice, and many claims outside the claimant's subscription.
        let mut messy = with_current(hetero, &homo_r.iter().map(|(m, a)| (m.replace('m', "h"), a.clone())).collect());
        messy.extend(with_current(homo, &hetero_r.iter().map(|(m, a)| (m.replace('h', "m"), a.clone())).collect()));
        inputs.push(messy);

        for ms in inputs {
            for assignor in [Assignor::Uniform, Assignor::Range] {
                let expect = assignor.assign(&ms, &parts.iter().copied().collect());
                for _ in 0..10 {
                    let mut ms = ms.clone();
                    rng.shuffle(&mut ms);
                    let mut parts = parts.clone();
                    rng.shuffle(&mut parts);
                    let parts: HashMap<Uuid, i32> = parts.into_iter().collect();
                    assert_eq!(assignor.assign(&ms, &parts), expect);
                }
            }
        }
    }

    #[test]
    fn members_without_subscriptions_get_empty_assignments() {
        let (t1, gone) = (topic(1), topic(99));
        let parts = HashMap::from([(t1, 5), (topic(2), 3)]);
        let ms = vec![member("a", &[t1]), member("idle", &[]), member("ghost", &[gone]), member("b", &[t1])];
        for assignor in [Assignor::Uniform, Assignor::Range] {
            let r = assignor.assign(&ms, &parts);
            check_valid(&ms, &parts, &r);
            assert!(r["idle"].is_empty() && r["ghost"].is_empty());
            assert_eq!(load(&r["a"]) + load(&r["b"]), 5);
            // Topic 2 has no subscriber: not assigned to anybody.
            assert!(r.values().all(|a| !a.contains_key(&topic(2))));
        }
        // Nobody subscribed, or nobody at all.
        for assignor in [Assignor::Uniform, Assignor::Range] {
            let r = assignor.assign(&ms[1..3], &parts);
            assert_eq!(r.len(), 2);
            assert!(r.values().all(Assignment::is_empty));
            assert!(assignor.assign(&[], &parts).is_empty());
        }
    }

    #[test]
    fn stale_current_partitions_are_ignored() {
        let (t1, t2, gone) = (topic(1), topic(2), topic(3));
        // t1 shrank from 8 to 4 partitions, t3 was deleted, t2 has a zero/negative count.
        let parts = HashMap::from([(t1, 4), (t2, 0), (topic(4), -1)]);
        let mut ms = vec![member("a", &[t1, t2, gone]), member("b", &[t1]), member("c", &[t1, topic(4)])];
        ms[0].current = Assignment::from([(t1, BTreeSet::from([0, 5, 6, 7])), (t2, BTreeSet::from([0])), (gone, BTreeSet::from([0, 1]))]);
        // b no longer subscribes to t2; it also claims a's partition 0 (first claimant wins).
        ms[1].current = Assignment::from([(t1, BTreeSet::from([0, 1, -1])), (t2, BTreeSet::from([1]))]);
        for assignor in [Assignor::Uniform, Assignor::Range] {
            let r = assignor.assign(&ms, &parts);
            check_valid(&ms, &parts, &r);
            assert_eq!(owners(&r).len(), 4);
            for a in r.values() {
                assert!(a.keys().all(|&t| t == t1), "{a:?}");
            }
        }
        // Uniform is sticky for what is still valid.
        let r = Assignor::Uniform.assign(&ms, &parts);
        assert!(r["a"][&t1].contains(&0));
        assert!(r["b"][&t1].contains(&1));

        // A topic removed entirely is dropped from everyone's target.
        let parts = HashMap::from([(t2, 3)]);
        let r = Assignor::Uniform.assign(&ms, &parts);
        check_valid(&ms, &parts, &r);
        assert_eq!(r["a"], Assignment::from([(t2, BTreeSet::from([0, 1, 2]))]));
        assert!(r["b"].is_empty() && r["c"].is_empty());
    }

    #[test]
    fn duplicate_member_ids_use_the_first() {
        let t1 = topic(1);
        let parts = HashMap::from([(t1, 4)]);
        let ms = vec![member("a", &[t1]), member("a", &[]), member("b", &[t1])];
        let r = Assignor::Uniform.assign(&ms, &parts);
        assert_eq!(r.len(), 2);
        assert_eq!(load(&r["a"]), 2);
    }

    fn timed(label: &str, f: impl FnOnce() -> HashMap<String, Assignment>) -> HashMap<String, Assignment> {
        let start = Instant::now();
        let r = f();
        eprintln!("assignor {label}: {:?}", start.elapsed());
        r
    }

    #[test]
    fn thousand_members_ten_thousand_partitions() {
        let ten: Vec<Uuid> = (1..=10).map(topic).collect();
        let one = vec![topic(100)];
        for (shape, ts, n) in [("10x1000", &ten, 1000), ("1x10000", &one, 10_000)] {
            let parts: HashMap<Uuid, i32> = ts.iter().map(|&t| (t, n)).collect();
            let ms = members(1000, ts);

            let fresh = timed(&format!("uniform homogeneous {shape} fresh"), || Assignor::Uniform.assign(&ms, &parts));
            check_valid(&ms, &parts, &fresh);
            assert_eq!(spread(&fresh), (10, 10));

            // One leaves, one joins: sticky path.
            let mut next = with_current(ms.clone(), &fresh);
            next.remove(500);
            next.push(member("zz-new", ts));
            let r = timed(&format!("uniform homogeneous {shape} churn"), || Assignor::Uniform.assign(&next, &parts));
            check_valid(&next, &parts, &r);
            assert_eq!(spread(&r), (10, 10));
            assert_eq!(moved(&fresh, &r), 10);

            let r = timed(&format!("range {shape}"), || Assignor::Range.assign(&ms, &parts));
            check_valid(&ms, &parts, &r);
            assert_eq!(spread(&r), (10, 10));
        }

        // Heterogeneous: each member subscribes to a random subset of ten topics (hundreds of
        // distinct subscriptions), from scratch and then from a start where one member held all.
        let mut rng = Rng(1);
        let parts: HashMap<Uuid, i32> = ten.iter().map(|&t| (t, 1000)).collect();
        let mut ms: Vec<MemberSpec> = (0..1000)
            .map(|i| {
                let mut sub: Vec<Uuid> = ten.iter().copied().filter(|_| rng.below(2) == 0).collect();
                if sub.is_empty() {
                    sub.push(ten[i % 10]);
                }
                member(&format!("m{i:04}"), &sub)
            })
            .collect();
        let r = timed("uniform heterogeneous 10x1000 fresh", || Assignor::Uniform.assign(&ms, &parts));
        check_valid(&ms, &parts, &r);
        check_converged(&ms, &r);

        let all: Assignment = ten.iter().map(|&t| (t, (0..1000).collect())).collect();
        ms[0].topics = ten.iter().copied().collect();
        ms[0].current = all;
        let r = timed("uniform heterogeneous 10x1000 from one owner", || Assignor::Uniform.assign(&ms, &parts));
        check_valid(&ms, &parts, &r);
        check_converged(&ms, &r);

        let mut next = with_current(ms, &r);
        next.remove(123);
        let r2 = timed("uniform heterogeneous 10x1000 churn", || Assignor::Uniform.assign(&next, &parts));
        check_valid(&next, &parts, &r2);
        check_converged(&next, &r2);
        eprintln!("assignor heterogeneous churn moved {} partitions", moved(&r, &r2));
    }

    /// Random heterogeneous groups, from scratch and after churn, as (members, partitions).
    fn random_groups(seed: u64, rounds: usize) -> Vec<(Vec<MemberSpec>, HashMap<Uuid, i32>)> {
        let mut rng = Rng(seed);
        let mut out = Vec::new();
        for _ in 0..rounds {
            let ts: Vec<Uuid> = (1..=1 + rng.below(8) as u128).map(topic).collect();
            let parts: HashMap<Uuid, i32> = ts.iter().map(|&t| (t, rng.below(30) as i32)).collect();
            let mut ms: Vec<MemberSpec> = (0..1 + rng.below(15))
                .map(|i| member(&format!("m{i}"), &ts.iter().copied().filter(|_| rng.below(3) > 0).collect::<Vec<_>>()))
                .collect();
            out.push((ms.clone(), parts.clone()));
            let r = Assignor::Uniform.assign(&ms, &parts);
            ms = with_current(ms, &r);
            ms.retain(|_| rng.below(4) > 0);
            ms.push(member("late", &ts[..1 + rng.below(ts.len())]));
            out.push((ms, parts));
        }
        out
    }

    #[test]
    fn balancer_wirings_agree() {
        // Both wirings answer "least-loaded subscriber" identically, so they must give the same
        // assignment; the automatic choice only changes the cost.
        for (ms, parts) in random_groups(11, 60) {
            let group = Group::new(&ms, &parts);
            let active: Vec<usize> = (0..group.members.len()).filter(|&m| !group.subs(m).is_empty()).collect();
            if active.is_empty() {
                continue;
            }
            let by_topic = heterogeneous(&group, &active, Some(Wiring::ByTopicClass));
            let by_member = heterogeneous(&group, &active, Some(Wiring::ByMemberClass));
            assert_eq!(by_topic, by_member);
            assert_eq!(heterogeneous(&group, &active, None), by_topic);
        }
    }

    #[test]
    fn many_topics() {
        // A subscription rollout over many single-partition topics: half the members do not yet
        // subscribe to the newest topic.
        let ts: Vec<Uuid> = (1..=2000).map(topic).collect();
        let parts: HashMap<Uuid, i32> = ts.iter().map(|&t| (t, 1)).collect();
        let mut ms = members(200, &ts);
        for m in ms.iter_mut().step_by(2) {
            m.topics.remove(&ts[0]);
        }
        for assignor in [Assignor::Uniform, Assignor::Range] {
            let r = timed(&format!("{} rollout 200 members, 2000x1", assignor.name()), || assignor.assign(&ms, &parts));
            check_valid(&ms, &parts, &r);
            if assignor == Assignor::Uniform {
                check_converged(&ms, &r);
                assert_eq!(spread(&r), (10, 10));
            }
        }

        // Every member with its own random half of 200 topics: many classes of both kinds.
        let mut rng = Rng(3);
        let ts: Vec<Uuid> = (1..=200).map(topic).collect();
        let parts: HashMap<Uuid, i32> = ts.iter().map(|&t| (t, 10)).collect();
        let ms: Vec<MemberSpec> =
            (0..200).map(|i| member(&format!("m{i:04}"), &ts.iter().copied().filter(|_| rng.below(2) == 0).collect::<Vec<_>>())).collect();
        for assignor in [Assignor::Uniform, Assignor::Range] {
            let r = timed(&format!("{} random halves 200 members, 200x10", assignor.name()), || assignor.assign(&ms, &parts));
            check_valid(&ms, &parts, &r);
            if assignor == Assignor::Uniform {
                check_converged(&ms, &r);
            }
        }
    }
}
