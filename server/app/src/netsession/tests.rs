//! The coalescing of refusal events: one per destination per window, folded ones counted,
//! the per-minute budget and the bound on remembered destinations.

use super::*;

fn by(reason: &str) -> RefusedBy {
    RefusedBy { policy: "org acme: registries".into(), reason: reason.into(), hint: "h".into() }
}

fn repeated(e: &EventKind) -> u32 {
    match e {
        EventKind::Network { repeated, .. } => *repeated,
        other => panic!("not a network event: {other:?}"),
    }
}

#[test]
fn refusals_of_one_destination_fold_into_the_next_event() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    assert!(c.offer("evil.example", 443, &by("a"), t0).is_some());
    for i in 1..=4 {
        assert!(c.offer("evil.example", 443, &by("b"), t0 + Duration::from_millis(i)).is_none());
    }
    // Another destination is not folded.
    assert!(c.offer("other.example", 443, &by("a"), t0).is_some());
    assert!(c.due(t0 + Duration::from_secs(1)).is_empty(), "not due before the window ends");
    let due = c.due(t0 + COALESCE);
    assert_eq!(due.len(), 1, "{due:?}");
    // Four folded: the event stands for the newest, and three more.
    assert_eq!(repeated(&due[0]), 3);
    let EventKind::Network { reason, .. } = &due[0] else { unreachable!() };
    assert_eq!(reason, "b");
    assert!(c.due(t0 + COALESCE * 3).is_empty(), "nothing folded since");
}

#[test]
fn a_minute_holds_at_most_the_budget_then_one_event_says_so() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    let events: Vec<EventKind> = (0..EVENTS_PER_MINUTE + 50)
        .filter_map(|i| c.offer(&format!("h{i}.example"), 443, &by("x"), t0))
        .collect();
    assert_eq!(events.len() as u32, EVENTS_PER_MINUTE + 1);
    let EventKind::Network { policy, .. } = events.last().unwrap() else { unreachable!() };
    assert_eq!(policy, "audit");
    // The next minute has its budget again.
    assert!(c.offer("later.example", 443, &by("x"), t0 + Duration::from_secs(61)).is_some());
}

#[test]
fn remembered_destinations_stay_bounded() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    for i in 0..COALESCE_KEYS * 3 {
        // Spread over minutes so the event budget does not stop the offers first.
        let now = t0 + Duration::from_secs(61 * (i / EVENTS_PER_MINUTE as usize) as u64);
        c.offer(&format!("h{i}.example"), 443, &by("x"), now);
        assert!(c.slots.len() <= COALESCE_KEYS, "{} slots", c.slots.len());
    }
}
