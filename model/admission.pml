/*
 * runlane's singleton and quota admission, as a model for the spin model checker.
 *
 * What it stands for: the key lock, the claim (plain or with admission), the denial that parks a
 * waiter, the start that counts its gates, the settlement that frees a slot, wakes the oldest
 * waiters and may hand the slot to a successor, the bulk denial of full keys' retries, the
 * run queue's hand-off of due runs, lease expiry and the claim that recovers it, cancellation
 * and requeue. RELIABILITY.md ("A checked model of admission") says what it leaves out and how
 * to run it; model/check.py runs it (`make model`).
 *
 * How to read it
 * --------------
 * Every `d_step` is one atomic unit of the stores: a PostgreSQL transaction that holds the run's
 * key lock (lock_keys) from its first statement to its commit, or a single statement, or an
 * SQLite store call (one transaction under the single writer; the memory store's calls run in
 * one event loop step). Between two `d_step`s anything else may happen: another engine's
 * transaction, a crash, a lease running out. An engine's in-memory state is only its turns
 * (`turns`, below); a crash loses them, and its leases then run out.
 *
 * The comment above a step names what it stands for, in lists headed by a kind and a colon:
 * `sql` for statements of src/runlane/stores/postgres/sql/queries.sql, `sql-fn` for functions
 * of its migrations, `sqlite` for statements of src/runlane/stores/sqlite/sql/queries.sql, and
 * `py` for the Python that decides for the memory and SQLite stores (functions of
 * runlane.stores.runbook and runlane.admission). tests/unit/test_model_sql.py checks that each
 * name exists, and that every statement of the admission protocol is named here.
 *
 * Runs are numbered in their FIFO order, `(created_at, id)`: run 0 is the oldest. Runs may be
 * started in any order (created_at is the starting engine's clock, and a start's statement may
 * commit after a later one's), so a run may arrive older than runs already waiting.
 */

/* ------------------------------------------------------------------ bounds and switches */

#ifndef RUNS
#define RUNS 3          /* runs of the key: 2 or 3 (the counts and formulas below name each) */
#endif
#if RUNS != 2 && RUNS != 3
#error RUNS is 2 or 3
#endif
/* Two engines, 1 and 2 (0: nobody); the processes below name each. */
#ifndef LIMIT
#define LIMIT 2         /* the singleton key's slots (0: the runs have no singleton key) */
#endif
#ifndef QUOTA
#define QUOTA 0         /* the quota's limit over the same runs (0: no quota) */
#endif
#ifndef CRASHES
#define CRASHES 2       /* engine crashes, at any step: the engine loses its turns */
#endif
#ifndef STALLS
#define STALLS 1        /* leases that run out while their turn is still in memory */
#endif
#ifndef LOSSES
#define LOSSES 1        /* run queue messages lost */
#endif
#ifndef CANCELS
#define CANCELS 1       /* cancel_run calls */
#endif
#ifndef REQUEUES
#define REQUEUES 1      /* requeue_run calls */
#endif
#ifndef SUSPENDS
#define SUSPENDS 1      /* suspensions of each run's turns (a sleep, a signal wait) */
#endif
#ifndef MAXREC
#define MAXREC 1        /* max_recovery_attempts: a recovery beyond it settles the run dead */
#endif
#ifndef FALLBACK
#define FALLBACK 1      /* a parked waiter's fallback timer (0: only a release wakes it) */
#endif
#ifndef LIVE
#define LIVE 0          /* 1 in the liveness check: a handed-off run's hold timer runs out
                           only once its message is lost (a message is consumed otherwise) */
#endif
#ifndef NARROW
#define NARROW 0        /* the quota counts only pending and running runs, not all active */
#endif

/* Mutations, each a bug the checks must find (`make model MUTANT=...`):
 *   MUTANT_FIFO       admission (a claim's, a start's) takes any free slot, ignoring the
 *                     older waiters it is for
 *   MUTANT_NOWAKE     a settlement frees the slot but wakes no waiter
 *   MUTANT_SNAPSHOT   a settlement counts itself among the holders (its snapshot still shows
 *                     its slot held: the `h.id <> ok.id` of `settle` forgotten)
 *   MUTANT_UNLOCKED   claim_admit counts before the key lock: the count and the admission are
 *                     two steps with other transactions in between
 *   MUTANT_QUOTA      a start counts the quota in a snapshot taken before its lock: the count
 *                     and the insert are two steps
 */

/* ------------------------------------------------------------------ the runs' rows */

#define NEW         0   /* not started yet (or its start was refused) */
#define PENDING     1
#define RUNNING     2
#define SUSPENDED   3
#define BLOCKED     4
#define CANCELLING  5
#define DONE        6   /* completed, failed, dead or cancelled */

byte st[RUNS];          /* status */
bool slot[RUNS];        /* holds_slot */
byte owner[RUNS];       /* lease_owner: the engine whose claim holds the lease, 0 none */
bool expired[RUNS];     /* lease_expires_at <= now */
byte due[RUNS];         /* a suspended/blocked run's wake_at: 0 ahead (or none), 1 due now,
                           2 handed off (hand_off_due pushed it to hold_until) */
bool timer[RUNS];       /* wake_at is ahead and time will reach it (a fallback timer, a sleep) */
bool msg[RUNS];         /* a hand-off message of the run is in the run queue */
byte recoveries[RUNS];
byte suspends[RUNS];    /* suspensions so far (bounded by SUSPENDS) */

/* The engines' memory: bit e-1 of turns[r] is set while engine e has a turn of run r. An
 * engine runs at most one task per run (LocalRuns), so it never claims a run it has a turn of. */
byte turns[RUNS];
#define B(e) ((1 << (e)) / 2)

/* What is left of the faults and calls the bounds allow. */
byte crashes = CRASHES, stalls = STALLS, losses = LOSSES, cancels = CANCELS,
     requeues = REQUEUES;
byte settled;           /* runs settled (the liveness formula reads it) */

#ifdef MUTANT_UNLOCKED
byte counted_by[RUNS];  /* the engine whose claim counted, before its lock */
bool counted_admit[RUNS];
#endif
#ifdef MUTANT_QUOTA
byte quota_seen[RUNS];  /* a start's quota count + 1, taken before its lock (0: none) */
byte quota_by[RUNS];
#endif

/* Scratch of the atomic steps: not part of the state. */
hidden byte i, w, held, ahead, room, counted, had;
hidden byte admit, first;
hidden byte exclusive, fifo, woken, quota_kept, leased_hold;

#define ACTIVE(x)   (st[x] != NEW && st[x] != DONE)
#define WAITING(x)  (st[x] == SUSPENDED || st[x] == BLOCKED)
/* A waiter of the key, as claim_admit, admission_counts and settle's `waiters` count one: an
 * active run without a slot that is not cancelling. (Runs held by a throttle or debounce are
 * not modelled; see RELIABILITY.md.) */
#define WAITER(x)   (LIMIT > 0 && ACTIVE(x) && !slot[x] && st[x] != CANCELLING)
#if NARROW
#define COUNTED(x)  (st[x] == PENDING || st[x] == RUNNING)
#else
#define COUNTED(x)  ACTIVE(x)
#endif

/* ------------------------------------------------------------------ counts */

/* The key's slot holders; the runs the quota counts. */
#if RUNS == 3
#define HOLDERS     (slot[0] + slot[1] + slot[2])
#define QUOTED      (COUNTED(0) + COUNTED(1) + COUNTED(2))
#else
#define HOLDERS     (slot[0] + slot[1])
#define QUOTED      (COUNTED(0) + COUNTED(1))
#endif
/* Whether a start or a requeue fits the quota (a refused one writes nothing). */
#define QUOTA_ROOM  (QUOTA == 0 || QUOTED < QUOTA)

inline count_holders() {
    held = HOLDERS
}

/* ahead = the waiters before run x in FIFO order. */
inline count_ahead(x) {
    ahead = 0; i = 0;
    do
    :: i < x -> if :: WAITER(i) -> ahead++ :: else -> skip fi; i++
    :: else -> break
    od
}

inline count_quota() {
    counted = QUOTED
}

/* admit = whether a free slot is waiter x's: fewer runs are ahead of it (holders, and older
 * waiters) than the limit. sql: admission_counts, claim_admit; sql-fn: runlane_start_counts;
 * sqlite: admission_counts, slot_holders; py: admission.admits, admission.free_slots */
inline admits(x) {
    count_holders();
    count_ahead(x);
#ifdef MUTANT_FIFO
    admit = (held < LIMIT);
#else
    admit = (held < LIMIT && ahead < LIMIT - held);
#endif
}

/* ------------------------------------------------------------------ the properties */

/* FIFO, checked as run x takes a slot: the runs ahead of it (holders, and waiters older than
 * it) are fewer than the limit, so every older waiter still has a slot left for it. With one
 * slot: no older run is waiting. */
inline check_fifo(x) {
    count_holders();
    count_ahead(x);
    fifo = (held + ahead < LIMIT);
    assert(fifo);
}

/* The invariants, after every step:
 *   exclusive    never more than LIMIT holders of the key's slots
 *   leased_hold  a leased run of the key holds its slot (admission happens in the claim)
 *   woken        no lost wake: each waiter a free slot is for (the oldest ones, as many as
 *                there are free slots) is due: pending, or waiting with wake_at reached or
 *                handed off to the run queue. Never only behind a fallback timer.
 *   quota_kept   the runs the quota counts are never more than its limit
 */
inline check() {
    count_holders();
    exclusive = (LIMIT == 0 || held <= LIMIT);
    assert(exclusive);
    room = (held < LIMIT -> LIMIT - held : 0);
    ahead = 0; i = 0;
    do
    :: i < RUNS ->
        leased_hold = (LIMIT == 0 || slot[i] || !(st[i] == RUNNING || st[i] == CANCELLING));
        assert(leased_hold);
        if
        :: WAITER(i) ->
            woken = (ahead >= room || st[i] == PENDING || (WAITING(i) && due[i] != 0));
            assert(woken);
            ahead++
        :: else -> skip
        fi;
        i++
    :: else -> break
    od;
    count_quota();
    quota_kept = (QUOTA == 0 || counted <= QUOTA);
    assert(quota_kept)
}

/* ------------------------------------------------------------------ row changes */

/* A claim's lease (models.claimed_run): running, leased to engine e, wake_at cleared; engine e
 * now has the turn. sql: claim; sqlite: claimable; py: runbook.claim */
inline lease(x, e) {
    st[x] = RUNNING; owner[x] = e; expired[x] = 0; due[x] = 0; timer[x] = 0;
    turns[x] = turns[x] | B(e)
}

/* A denied waiter is parked blocked until its fallback timer or a release's wake
 * (models.blocked_run). sql: blocked_set, park; py: runbook.claim */
inline park(x) {
    st[x] = BLOCKED; owner[x] = 0; expired[x] = 0; due[x] = 0; timer[x] = FALLBACK
}

/* A wake (models.wake, wake_set): a suspended or blocked run is due now; a pending run already
 * is. (A leased run's wake_requested_at is not modelled: no waiter is leased.)
 * sql: wake_set; sqlite: wake_waiting, request_wake_of_leased */
inline wake(x) {
    if
    :: WAITING(x) -> due[x] = 1; timer[x] = 0
    :: else -> skip
    fi
}

/* A terminal settlement of run x, with its key lock held: the slot is released, and the oldest
 * waiters for the key's free slots are woken (after a waiter too); with a successor engine s
 * and a slot released, the first of them, when not leased, takes the slot at once, leased to s.
 * sql: settle, fenced_writes, lock_keys; sqlite: next_waiters, stamp_handoff;
 * py: runbook.finish, runbook.settle */
inline finish(x, s) {
    had = slot[x];
    printf("run %d settles (slot %d)\n", x, had);
    st[x] = DONE; slot[x] = 0; owner[x] = 0; expired[x] = 0; due[x] = 0; timer[x] = 0;
    settled++;
    if
    :: LIMIT > 0 ->
        count_holders();
#ifdef MUTANT_SNAPSHOT
        held = held + had;
#endif
        room = (held < LIMIT -> LIMIT - held : 0);
        first = 1; w = 0;
        do
        :: w < RUNS && room > 0 ->
            if
            :: WAITER(w) ->
                room--;
                if
                :: first && s > 0 && had && st[w] != RUNNING ->
                    /* sql: settle (its `handed`); py: runbook.settle */
                    check_fifo(w);
                    slot[w] = 1;
                    lease(w, s);
                    printf("  run %d handed the slot, leased to engine %d\n", w, s)
                :: else ->
#ifndef MUTANT_NOWAKE
                    wake(w);
                    printf("  run %d woken\n", w)
#else
                    skip
#endif
                fi;
                first = 0
            :: else -> skip
            fi;
            w++
        :: else -> break
        od
    :: else -> skip
    fi
}

/* ------------------------------------------------------------------ the steps of a run */

/* A start, its gates counted under its keys' locks in the statement that inserts it: refused
 * over the quota (ConcurrencyLimitError: nothing written, so no step here), else created parked
 * behind a full key (as a claim would park it), or claimed at once for engine e (a start with a
 * lease) when a claim would admit it, else pending. A batch's starts on keys all apart are
 * this step once each (none counts another's run): one statement holds them. sql: insert_gated,
 * insert_gated_many, gate_counts, lock_keys, insert_given, insert_limited,
 * limit_counts; sql-fn: runlane_start_counts, runlane_limited_start_counts;
 * sqlite: active_ids_of_key; py: runbook.create, admission.quota_refusal,
 * admission.claimed_at_start */
inline insert(x, e) {
    if
    :: LIMIT > 0 ->
        admits(x);
        if
        :: !admit -> park(x); printf("run %d started: parked behind a full key\n", x)
        :: admit && e > 0 -> check_fifo(x); slot[x] = 1; lease(x, e);
            printf("run %d started: admitted, leased to engine %d\n", x, e)
        :: else -> st[x] = PENDING; printf("run %d started: pending\n", x)
        fi
    :: else ->
        if
        :: e > 0 -> lease(x, e); printf("run %d started: leased to engine %d\n", x, e)
        :: else -> st[x] = PENDING; printf("run %d started: pending\n", x)
        fi
    fi
}

#if !defined(MUTANT_QUOTA) || QUOTA == 0
inline start(x, e) {
    d_step { st[x] == NEW && QUOTA_ROOM -> insert(x, e); check() }
}
#else
/* The mutation: the count, then (other steps in between) the insert. */
inline start(x, e) {
    if
    :: d_step {
           st[x] == NEW && quota_seen[x] == 0 ->
           count_quota(); quota_seen[x] = counted + 1; quota_by[x] = e;
           printf("run %d's start counts the quota, unlocked: %d\n", x, counted)
       }
    :: d_step { st[x] == NEW && quota_seen[x] != 0 && quota_by[x] == e ->
            if
            :: QUOTA > 0 && quota_seen[x] - 1 >= QUOTA -> skip
            :: else -> insert(x, e)
            fi;
            quota_seen[x] = 0;
            check()
        }
    fi
}
#endif

/* Whether engine e may claim run x: pending; waiting and due (or, with a hand-off message,
 * whatever its wake_at); not a run e has a turn of. */
#define CLAIMABLE(x, e, h) (!(turns[x] & B(e)) && \
    (st[x] == PENDING || (WAITING(x) && (due[x] == 1 || (h)))))

/* The claim's first transaction (the key lock, then claim_plain or claim_admit, whichever
 * applies): a run holding its slot (or without a key) is leased; a waiter is admitted when a
 * slot is free for its FIFO rank, and parked otherwise.
 * sql: lock_keys, claim_plain, claim_admit, quiet_commit_if_parked; sqlite: claimable,
 * admission_counts; py: runbook.claim */
inline take(x, e) {
    if
    :: LIMIT == 0 || slot[x] -> lease(x, e); printf("engine %d claims run %d\n", e, x)
    :: else ->
        admits(x);
        if
        :: admit -> check_fifo(x); slot[x] = 1; lease(x, e);
            printf("engine %d claims run %d: admitted\n", e, x)
        :: else -> park(x); printf("engine %d claims run %d: denied, parked\n", e, x)
        fi
    fi
}

#ifndef MUTANT_UNLOCKED
inline claim(x, e) {
    d_step { CLAIMABLE(x, e, 0) -> take(x, e); check() }
}
#else
inline claim(x, e) {
    if
    :: d_step { CLAIMABLE(x, e, 0) && counted_by[x] == 0 && LIMIT > 0 && !slot[x] ->
            admits(x); counted_by[x] = e; counted_admit[x] = admit;
            printf("engine %d counts for run %d, unlocked: admit %d\n", e, x, admit) }
    :: d_step { counted_by[x] == e ->
            counted_by[x] = 0;
            if
            :: CLAIMABLE(x, e, 0) && !slot[x] ->
                if
                :: counted_admit[x] -> check_fifo(x); slot[x] = 1; lease(x, e);
                    printf("engine %d claims run %d: admitted by its count\n", e, x)
                :: else -> park(x); printf("engine %d claims run %d: parked by its count\n", e, x)
                fi
            :: else -> skip
            fi;
            check()
        }
    :: d_step { CLAIMABLE(x, e, 0) && (slot[x] || LIMIT == 0) -> lease(x, e); check() }
    fi
}
#endif

/* A hand-off message taken off the run queue by engine e: a claim with handoff=True, which
 * takes a waiting run whatever its wake_at (rearm_held re-arms a held run such a claim came
 * too early for; held runs are not modelled). An engine with a turn of the run in flight keeps
 * the message for the claim after that turn (LocalRuns' follow-up): here it takes it then.
 * sql: claim_plain, claim_admit, rearm_held; sqlite: claimable, rearm_held; py: runbook.claim */
inline consume(x, e) {
    d_step {
        msg[x] && !(turns[x] & B(e)) -> msg[x] = 0;
        if
        :: CLAIMABLE(x, e, 1) -> take(x, e)
        :: else -> skip
        fi;
        check()
    }
}

/* The claim of a run whose lease ran out (a recovery), in a transaction of its own after the
 * first found nothing to claim: its key lock and its row, then one more recovery counted; a
 * cancelling run settles cancelled, a run recovered too often settles dead (both release its
 * slot and wake, as any settlement), any other is leased to e and keeps its slot.
 * sql: lock_keys, lock_run, lock_run_wait, add_recovery, admission_counts, claim, park;
 * sqlite: claimable; py: runbook.claim */
inline recover(x, e) {
    d_step {
        !(turns[x] & B(e)) && (st[x] == RUNNING || st[x] == CANCELLING) && expired[x] ->
        recoveries[x]++;
        printf("engine %d recovers run %d (recovery %d)\n", e, x, recoveries[x]);
        if
        :: st[x] == CANCELLING -> finish(x, 0)
        :: recoveries[x] > MAXREC -> finish(x, 0)
        :: else -> lease(x, e)
        fi;
        check()
    }
}

/* Engine e's turn ends in a settlement, fenced by its lease (a cancelling run settles
 * cancelled); a lease that moved on writes nothing (LeaseLostError). With s > 0 the engine
 * asks for the freed slot's successor, leased to itself. Settlements made together take every
 * key lock of the group first, then settle one by one: each is this step in turn.
 * sql: settle, fenced_writes, lock_keys, lock_keys_of_runs; py: runbook.settle */
inline settle(x, e, s) {
    d_step {
        (turns[x] & B(e)) ->
        turns[x] = turns[x] & ~B(e);
        if
        :: owner[x] == e && (st[x] == RUNNING || st[x] == CANCELLING) ->
            printf("engine %d's turn settles run %d (successor: %d)\n", e, x, s);
            finish(x, s)
        :: else -> printf("engine %d's turn of run %d: lease lost\n", e, x)
        fi;
        check()
    }
}

/* Engine e's turn suspends the run (a sleep, a signal wait): fenced, it keeps its slot and
 * releases the lease; its timer (or signal) comes later. sql: suspend, fenced_writes */
inline suspend(x, e) {
    d_step {
        (turns[x] & B(e)) && owner[x] == e && st[x] == RUNNING && suspends[x] < SUSPENDS ->
        turns[x] = turns[x] & ~B(e);
        suspends[x]++;
        st[x] = SUSPENDED; owner[x] = 0; expired[x] = 0; due[x] = 0; timer[x] = 1;
        printf("engine %d's turn suspends run %d\n", e, x);
        check()
    }
}

/* cancel_run: a leased run goes cancelling (its turn, or the claim that recovers it, settles
 * it); any other settles cancelled at once, releasing its slot and waking the waiters the free
 * slots are for. sql: run_tree, lock_keys, lock_runs, mark_cancelling, settle, fenced_writes;
 * sqlite: descendant_ids; py: runbook.finish */
inline cancel(x) {
    d_step {
        cancels > 0 && ACTIVE(x) && st[x] != CANCELLING ->
        cancels--;
        printf("cancel run %d\n", x);
        if
        :: st[x] == RUNNING -> st[x] = CANCELLING
        :: else -> finish(x, 0)
        fi;
        check()
    }
}

/* requeue_run: a settled run back to pending, through the quota's gate as a start (refused,
 * it writes nothing); its slot was released by its settlement, and it claims again, at its old
 * place in FIFO order.
 * sql: gate_counts, lock_run_wait, requeue; py: runbook.refusal */
inline requeue(x) {
    d_step {
        requeues > 0 && st[x] == DONE && QUOTA_ROOM ->
        requeues--; settled--;
        st[x] = PENDING; recoveries[x] = 0; suspends[x] = 0;
        printf("run %d requeued\n", x);
        check()
    }
}

/* A timer poll with a run queue takes the run's due wake for hand-off: wake_at pushed to
 * hold_until, a message published (skipping rows others hold). sql: hand_off_due;
 * sqlite: due_ids */
inline hand_off(x) {
    d_step {
        WAITING(x) && due[x] == 1 -> due[x] = 2; msg[x] = 1;
        printf("run %d handed off to the run queue\n", x);
        check()
    }
}

/* A timer poll's bulk denial: a due, blocked waiter whose key has every slot held is parked
 * again, under the key's lock. sql: lock_waiter_keys, park_full_waiters, quiet_commit;
 * py: runbook.park_full_waiters */
inline park_full(x) {
    d_step {
        LIMIT > 0 && st[x] == BLOCKED && !slot[x] && due[x] == 1 && HOLDERS >= LIMIT ->
        park(x);
        printf("run %d parked again (key full)\n", x);
        check()
    }
}

/* ------------------------------------------------------------------ processes */

/* Everything that happens to one run from outside a turn, by whichever engine does it. */
proctype Run(byte r) {
end:
    do
    :: start(r, 0)                  /* a start without a lease: pending, or parked */
    :: start(r, 1)                  /* create_runs(..., lease=...) by engine 1 */
    :: start(r, 2)
    :: claim(r, 1)                  /* a poll (pending, due) or a wake's local task */
    :: claim(r, 2)
    :: recover(r, 1)                /* expired_run_ids, then the recovering claim */
    :: recover(r, 2)
    :: hand_off(r)                  /* a timer poll of an engine with a run queue */
    :: park_full(r)                 /* a timer poll's bulk denial */
    :: cancel(r)
    :: requeue(r)
    /* time passes */
    :: d_step {
           WAITING(r) && due[r] == 0 && timer[r] -> due[r] = 1; timer[r] = 0;
           printf("run %d: its timer is due\n", r); check()
       }
    :: d_step {
           WAITING(r) && due[r] == 2 && (!LIVE || !msg[r]) -> due[r] = 1;
           printf("run %d: its hand-off's hold ran out\n", r); check()
       }
    /* a lease runs out while its turn is still in memory: its engine stalled past the lease */
    :: d_step {
           stalls > 0 && owner[r] != 0 && !expired[r] -> stalls--; expired[r] = 1;
           printf("run %d: lease of engine %d ran out (stalled)\n", r, owner[r])
       }
    /* the run queue loses the run's message */
    :: d_step {
           losses > 0 && msg[r] -> losses--; msg[r] = 0; printf("run %d: message lost\n", r)
       }
    od
}

/* What an engine does with the runs it has turns of, and with the run queue's messages (one
 * process an engine, so that under weak fairness each engine's turns end). */
#define TURN(x) \
    :: settle(x, e, 0)              /* the turn settles the run */ \
    :: settle(x, e, 1)              /* ... and asks for the successor */ \
    :: suspend(x, e) \
    :: consume(x, e)                /* the run queue's message (handoff=True) */

proctype Engine(byte e) {
end:
    do
    TURN(0)
    TURN(1)
#if RUNS == 3
    TURN(2)
#endif
    od
}

/* An engine crashes at any step: it loses its turns and comes back empty-handed. Its leases
 * stay in the store; the model counts them run out at once (a lease's expiry only enables the
 * recovering claim, which may come at any later step, so no store state is left out). */
inline crash(e) {
    d_step {
        crashes > 0 ->
        crashes--;
        printf("engine %d crashes\n", e);
        i = 0;
        do
        :: i < RUNS ->
            turns[i] = turns[i] & ~B(e);
            if :: owner[i] == e -> expired[i] = 1 :: else -> skip fi;
#ifdef MUTANT_UNLOCKED
            if :: counted_by[i] == e -> counted_by[i] = 0 :: else -> skip fi;
#endif
#ifdef MUTANT_QUOTA
            if :: quota_seen[i] != 0 && quota_by[i] == e -> quota_seen[i] = 0 :: else -> skip fi;
#endif
            i++
        :: else -> break
        od
    }
}

proctype Crashes() {
end:
    do
    :: crash(1)
    :: crash(2)
    od
}

init {
    atomic {
        i = 0;
        do
        :: i < RUNS -> run Run(i); i++
        :: else -> break
        od;
        run Engine(1);
        run Engine(2);
        run Crashes()
    }
}

/* ------------------------------------------------------------------ liveness */

#ifdef LTL
/* Every run settles, under weak fairness (pan -f: a process that can always move eventually
 * moves) and with the faults bounded (the bounds above: they are spent at some point). A run
 * settles only from a lease, which a keyed run holds only with its slot, or by a cancel: so
 * every waiter is admitted in the end, unless cancelled. */
ltl settles { <> [] (settled == RUNS) }

/* Time goes on while a run is unsettled, even when nothing else can happen: a state where
 * every other process is blocked (a waiter nobody will wake, say) then lies on a cycle, which
 * the search under weak fairness finds. (pan -f does not count a blocked system's stutter as a
 * fair cycle: without this process such a state would pass.) */
active proctype Clock() {
    do
    :: settled < RUNS -> skip
    od
}
#endif
