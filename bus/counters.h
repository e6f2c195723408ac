/*
 * counters.h - per-process counters that tools read while the process runs.
 *
 * Each process that publishes or subscribes keeps one small shared-memory
 * file, /dev/shm/tickbus-counters.<pid> ($TICKBUS_COUNTERS_DIR overrides the
 * directory): a header, TB_COUNTERS_SLOTS stream slots, TB_COUNTERS_MRS
 * memory-registration records and TB_COUNTERS_HISTS latency histograms.
 * Tools (tb-stat, tb-doctor) find the files with tb_counters_read_dir() and
 * read them without disturbing the writer.  The writer holds a shared
 * flock on its file for its life; a file left by a process that crashed
 * is removed by the next process to make its own (or by tb-stat), never
 * while anyone holds its lock.
 *
 * The file is created afresh (O_EXCL, never through a link) with mode 0640
 * ($TICKBUS_COUNTERS_MODE may narrow it to 0600 or keep group read for a
 * monitoring group; it never grants anything to others): stream names, peer
 * addresses and memory layout are nobody else's business.
 *
 * Threads:
 *   tb_counters_open/add/take/remove_stream/close   any thread (a mutex)
 *   tb_counters_mr_add/peer/remove, tb_counters_hist_add/remove
 *                                   any thread (the same mutex)
 *   tb_counter_add/inc on a slot    the one thread that owns the slot
 *   tb_counter_hist_record          the one thread that owns the histogram
 *   tb_counters_heartbeat           any thread, not racing with close
 *   readers                         any process, read-only
 */
#ifndef TB_COUNTERS_H
#define TB_COUNTERS_H

#include "bus/barrier.h"
#include <tickbus/tickbus.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TB_COUNTERS_MAGIC 0x52544e43554f4354ull /* "TCOUCNTR" */
#define TB_COUNTERS_VERSION 3u /* 2: 32 counters a slot; 3: MRs, histograms */
/* Slots a process creates: 64 streams per process is far beyond a feed
 * handler's or a strategy's needs (24 KiB of the file's 62 KiB). */
#define TB_COUNTERS_SLOTS 64
/* Largest slot count a reader accepts, so a corrupt header cannot make it
 * walk far. */
#define TB_COUNTERS_MAX_SLOTS 256
/* Memory registrations a process records: an rc publisher registers, per
 * subscriber, a credit slot, its ring and its ring's position word, so 256
 * covers 85 subscribers (TB_RC_MAX_SUBS is 64). */
#define TB_COUNTERS_MRS 256
#define TB_COUNTERS_MAX_MRS 1024
/* Latency histograms a process exports: a few per stream is plenty. */
#define TB_COUNTERS_HISTS 16
#define TB_COUNTERS_MAX_HISTS 256
/* Buckets of an exported histogram: bucket i counts values <= 2^(i+6) ns
 * (64 ns, 128 ns, ... 2^36 ns = 68.7 s), the last one everything above.
 * Powers of two make recording one bit scan; factor-of-two resolution is
 * what a dashboard needs (the exact tails are tb-latency's job). */
#define TB_COUNTERS_HIST_BUCKETS 32
#define TB_COUNTERS_HIST_SHIFT 6
/* The mode a counters file is created with, unless $TICKBUS_COUNTERS_MODE
 * (octal) says otherwise; a mode with any bit for others or any execute bit
 * is refused with a warning. */
#define TB_COUNTERS_MODE_DEFAULT 0640
#define TB_COUNTERS_DIR_DEFAULT "/dev/shm"
#define TB_COUNTERS_PREFIX "tickbus-counters."

typedef enum tb_counter_role {
	TB_ROLE_NONE = 0,
	TB_ROLE_PUBLISHER = 1,
	TB_ROLE_SUBSCRIBER = 2,
	TB_ROLE_RECOVERY = 3,
} tb_counter_role_t;

/* Counter indices.  New counters take the next index (up to
 * TB_CTR_CAPACITY) without changing the layout; the header says how many
 * the writer knows. */
typedef enum tb_counter_id {
	TB_CTR_PUBLISHED = 0,
	TB_CTR_DELIVERED,
	TB_CTR_GAPS,
	TB_CTR_LAPPED,
	TB_CTR_BACK_PRESSURED,
	TB_CTR_RECOVERY_REQUESTS,
	TB_CTR_RECOVERY_OK,
	TB_CTR_RECOVERY_FAILED,
	TB_CTR_ERRORS,
	TB_CTR_DUPLICATES,
	TB_CTR_MALFORMED,
	/* Malformed datagrams (ud, udp) by kind, in the order of enum
	 * tb_packet_fault (packet.h): TB_CTR_MALFORMED_SHORT + fault - 1.  Each
	 * is also counted in TB_CTR_MALFORMED. */
	TB_CTR_MALFORMED_SHORT,
	TB_CTR_MALFORMED_BAD_MAGIC,
	TB_CTR_MALFORMED_BAD_VERSION,
	TB_CTR_MALFORMED_BAD_LENGTH,
	TB_CTR_MALFORMED_BAD_FLAGS,
	TB_CTR_MALFORMED_BAD_COUNT,
	TB_CTR_MALFORMED_BAD_FRAME,
	TB_CTR_MALFORMED_WRONG_STREAM,
	TB_CTR_MALFORMED_BAD_SEQ,
	TB_CTR_REORDERED,   /* datagrams that came after their gap was told */
	TB_CTR_STALE_EPOCH, /* datagrams of a publisher epoch already left */
	TB_CTR_REPLAYED,      /* frames delivered by recovery */
	TB_CTR_DATA_LOSS,     /* TB_DATA_LOSS events: recovery gave up */
	/* Datagrams (ud, udp) dropped before anything in them was acted on:
	 * a tag that did not verify (dgram_auth.h), and a nonce already seen
	 * in the epoch (a replay, or a copy the fabric made). */
	TB_CTR_DGRAM_FORGED,
	TB_CTR_DGRAM_REPLAYED,
	TB_CTR_READ_FILLED,   /* frames an rc subscriber read back itself
				 (RDMA READ from the publisher's ring) */
	TB_CTR_READ_MISSED,   /* gaps it could not fill so, handed on as laps */
	TB_CTR_COUNT,
} tb_counter_id_t;

#define TB_CTR_CAPACITY 32

/*
 * File layout (native byte order: the file never leaves the host).
 *
 * Header, one 128-byte block.  `version` is stored last when the file is
 * created (release, R1 in open_locked) and checked first by readers
 * (acquire, A1 in read_mapped, pairs with R1).
 */
typedef struct tb_counters_hdr {
	uint64_t magic;                /*   0 TB_COUNTERS_MAGIC */
	_Atomic uint32_t version;      /*   8 TB_COUNTERS_VERSION */
	uint32_t hdr_size;             /*  12 sizeof(tb_counters_hdr_t) */
	uint32_t slot_size;            /*  16 sizeof(tb_counter_slot_t) */
	uint32_t n_slots;              /*  20 */
	uint32_t n_counters;           /*  24 TB_CTR_COUNT of the writer */
	int32_t pid;                   /*  28 */
	uint64_t start_ticks;          /*  32 /proc/<pid>/stat starttime */
	uint64_t start_ns;             /*  40 CLOCK_REALTIME at creation */
	_Atomic uint64_t heartbeat_ns; /*  48 CLOCK_REALTIME, 0 = never */
	uint32_t n_mrs;                /*  56 MR records after the slots */
	uint32_t n_hists;              /*  60 histograms after the MRs */
	char name[64];                 /*  64 basename of argv[0], NUL-ended */
} tb_counters_hdr_t;

/*
 * Stream slot, 384 bytes on six cache lines: identity on the first two
 * (written only by add/remove), counters on the last four (written only by
 * the owner thread), so a reader polling the identity never shares a line
 * with the hot increments of another slot.
 *
 * `seq` is a sequence lock over the identity: odd while add/remove rewrite
 * it.  Writer: seq odd, release fence (W1), identity, store_release seq
 * even (R2).  Reader: load_acquire seq (A2 pairs with R2), copy, acquire
 * fence (A3 pairs with W1), seq again.
 */
typedef struct tb_counter_slot {
	_Atomic uint32_t seq;              /*   0 */
	_Atomic uint32_t active;           /*   4 1 = in use */
	uint32_t stream_id;                /*   8 */
	uint32_t role;                     /*  12 tb_counter_role_t */
	char stream_name[64];              /*  16 NUL-ended */
	char transport[16];                /*  80 NUL-ended: shm, rc, ud, udp */
	uint8_t pad0[32];                  /*  96 */
	_Atomic uint64_t c[TB_CTR_CAPACITY]; /* 128 indexed by tb_counter_id_t */
} tb_counter_slot_t;

_Static_assert(offsetof(tb_counters_hdr_t, magic) == 0, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, version) == 8, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, hdr_size) == 12, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, slot_size) == 16, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, n_slots) == 20, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, n_counters) == 24, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, pid) == 28, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, start_ticks) == 32, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, start_ns) == 40, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, heartbeat_ns) == 48, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, n_mrs) == 56, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, n_hists) == 60, "counters layout");
_Static_assert(offsetof(tb_counters_hdr_t, name) == 64, "counters layout");
_Static_assert(sizeof(tb_counters_hdr_t) == 128, "counters layout");
_Static_assert(offsetof(tb_counter_slot_t, seq) == 0, "counters layout");
_Static_assert(offsetof(tb_counter_slot_t, active) == 4, "counters layout");
_Static_assert(offsetof(tb_counter_slot_t, stream_id) == 8, "counters layout");
_Static_assert(offsetof(tb_counter_slot_t, role) == 12, "counters layout");
_Static_assert(offsetof(tb_counter_slot_t, stream_name) == 16, "counters layout");
_Static_assert(offsetof(tb_counter_slot_t, transport) == 80, "counters layout");
_Static_assert(offsetof(tb_counter_slot_t, c) == 128, "counters layout");
_Static_assert(sizeof(tb_counter_slot_t) == 384, "counters layout");
_Static_assert(TB_CTR_COUNT <= TB_CTR_CAPACITY, "counters layout");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "counters layout");

/* What a memory registration is for; tb-doctor --audit judges its access
 * flags against this (tools/doctor/audit.c). */
typedef enum tb_mr_use {
	TB_MR_USE_NONE = 0,
	TB_MR_RING_TX = 1,  /* a publisher's frame ring: the source of its
			       sends and writes; nothing remote */
	TB_MR_RING_RX = 2,  /* an rc subscriber's ring: the publisher writes it
			       (REMOTE_WRITE, one peer) */
	TB_MR_CREDIT = 3,   /* a publisher's credit slot for one subscriber:
			       that subscriber writes it (REMOTE_WRITE) */
	TB_MR_SEND = 4,     /* send buffers (ud datagrams, heartbeats) */
	TB_MR_RECV = 5,     /* receive buffers (LOCAL_WRITE only) */
	TB_MR_REPLAY = 6,   /* history a recovery peer reads (REMOTE_READ) */
	TB_MR_USE_COUNT
} tb_mr_use_t;

/*
 * Memory-registration record, 128 bytes on two cache lines, written only by
 * tb_counters_mr_* under the writer's mutex, inside the same sequence lock
 * as a stream slot's identity (W1 .. R2 / A2, A3).  `access` holds the
 * IBV_ACCESS_* bits exactly as passed to ibv_reg_mr.
 */
typedef struct tb_counter_mr {
	_Atomic uint32_t seq;    /*   0 sequence lock, as tb_counter_slot_t */
	_Atomic uint32_t active; /*   4 1 = registered */
	uint32_t stream_id;      /*   8 */
	uint32_t role;           /*  12 tb_counter_role_t */
	uint64_t addr;           /*  16 first byte registered */
	uint64_t length;         /*  24 bytes */
	uint32_t access;         /*  32 IBV_ACCESS_* */
	uint32_t use;            /*  36 tb_mr_use_t */
	uint32_t lkey;           /*  40 */
	uint32_t rkey;           /*  44 */
	uint32_t n_peers;        /*  48 peers the rkey was handed to */
	uint32_t pad0;           /*  52 */
	char peer[64];           /*  56 the last of them, NUL-ended */
	char transport[8];       /* 120 NUL-ended: rc, ud */
} tb_counter_mr_t;

_Static_assert(offsetof(tb_counter_mr_t, seq) == 0, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, active) == 4, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, stream_id) == 8, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, role) == 12, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, addr) == 16, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, length) == 24, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, access) == 32, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, use) == 36, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, lkey) == 40, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, rkey) == 44, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, n_peers) == 48, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, peer) == 56, "counters layout");
_Static_assert(offsetof(tb_counter_mr_t, transport) == 120, "counters layout");
_Static_assert(sizeof(tb_counter_mr_t) == 128, "counters layout");

/*
 * Latency histogram, 384 bytes on six cache lines: identity on the first
 * (sequence lock as above), counts on the other five, written only by the
 * owner thread (relaxed, as tb_counter_add).  A reader's copy may be a
 * moment inconsistent between buckets and `sum_ns`; tools derive the count
 * from the buckets.
 */
typedef struct tb_counter_hist {
	_Atomic uint32_t seq;    /*   0 */
	_Atomic uint32_t active; /*   4 */
	uint32_t stream_id;      /*   8 0 when not a stream's */
	uint32_t role;           /*  12 tb_counter_role_t, or TB_ROLE_NONE */
	char name[48];           /*  16 [a-z0-9_], NUL-ended: "delivery" */
	_Atomic uint64_t sum_ns; /*  64 */
	uint8_t pad0[56];        /*  72 */
	_Atomic uint64_t b[TB_COUNTERS_HIST_BUCKETS]; /* 128 */
} tb_counter_hist_t;

_Static_assert(offsetof(tb_counter_hist_t, stream_id) == 8, "counters layout");
_Static_assert(offsetof(tb_counter_hist_t, role) == 12, "counters layout");
_Static_assert(offsetof(tb_counter_hist_t, name) == 16, "counters layout");
_Static_assert(offsetof(tb_counter_hist_t, sum_ns) == 64, "counters layout");
_Static_assert(offsetof(tb_counter_hist_t, b) == 128, "counters layout");
_Static_assert(sizeof(tb_counter_hist_t) == 384, "counters layout");

/* ------------------------------------------------------------- writing */

/*
 * Adds `n` to counter `id`.  Hot path: no lock, no system call, no
 * lock-prefixed instruction.  A relaxed load and a relaxed store suffice
 * because only the slot's owner thread writes it; readers see each value
 * whole (8-byte atomic), perhaps a moment late.  Unpaired: no reader
 * (copy_slot in counters.c) reads anything else on the strength of a
 * counter's value.
 */
static inline void tb_counter_add(tb_counter_slot_t *slot, tb_counter_id_t id,
				  uint64_t n)
{
	_Atomic uint64_t *c = &slot->c[id];

	tb_atomic_store_relaxed(c, tb_atomic_load_relaxed(c) + n);
}

static inline void tb_counter_inc(tb_counter_slot_t *slot, tb_counter_id_t id)
{
	tb_counter_add(slot, id, 1);
}

/* The owner's own view of a counter (relaxed, unpaired, as tb_counter_add). */
static inline uint64_t tb_counter_get(const tb_counter_slot_t *slot,
				      tb_counter_id_t id)
{
	return tb_atomic_load_relaxed(&((tb_counter_slot_t *)slot)->c[id]);
}

/* The bucket of `ns` in an exported histogram (see
 * TB_COUNTERS_HIST_BUCKETS). */
static inline unsigned tb_counter_hist_bucket(int64_t ns)
{
	uint64_t x = ns > 1 ? (uint64_t)ns - 1 : 1;
	int b = 64 - __builtin_clzll(x) - TB_COUNTERS_HIST_SHIFT;

	if (b < 0)
		return 0;
	return b >= TB_COUNTERS_HIST_BUCKETS ? TB_COUNTERS_HIST_BUCKETS - 1
					     : (unsigned)b;
}

/* The upper bound in ns of bucket `i` (< TB_COUNTERS_HIST_BUCKETS - 1; the
 * last bucket has none). */
static inline uint64_t tb_counter_hist_le_ns(unsigned i)
{
	return 1ull << (i + TB_COUNTERS_HIST_SHIFT);
}

/*
 * Counts `ns` (negative counts as 0) in `h`.  Hot path: a bit scan and two
 * relaxed load/store pairs, no lock, no system call; only the owner thread
 * records, readers see each count whole (unpaired, as tb_counter_add).
 * NULL is a no-op, so a process without a counters file records nothing.
 */
static inline void tb_counter_hist_record(tb_counter_hist_t *h, int64_t ns)
{
	_Atomic uint64_t *b;

	if (tb_unlikely(!h))
		return;
	b = &h->b[tb_counter_hist_bucket(ns)];
	tb_atomic_store_relaxed(b, tb_atomic_load_relaxed(b) + 1);
	tb_atomic_store_relaxed(&h->sum_ns, tb_atomic_load_relaxed(&h->sum_ns) +
				(uint64_t)(ns > 0 ? ns : 0));
}

/* Creates this process's counters file if it has none yet (also done by
 * the first add_stream).  The file is removed by tb_counters_close or at
 * exit().  Returns 0 or a TB_E* code with a message. */
int tb_counters_open(void);

/* Takes a free slot for a stream, with zeroed counters, and returns it; or
 * NULL with a message (bad role, no file, all slots taken).  `name` and
 * `transport` are truncated to fit. */
tb_counter_slot_t *tb_counters_add_stream(uint32_t stream_id, const char *name,
					  tb_counter_role_t role,
					  const char *transport);

/*
 * The slot a publisher or subscriber counts into: a shared one from
 * tb_counters_add_stream or, when none can be had, `own` (the caller's,
 * zeroed; counted into, seen by no tool) after a warning naming the stream
 * and why.  Never NULL, never fails: counters are for watching, and a
 * stream runs without them.
 */
tb_counter_slot_t *tb_counters_take_stream(tb_counter_slot_t *own,
					   uint32_t stream_id, const char *name,
					   tb_counter_role_t role,
					   const char *transport);

/* Frees a slot from tb_counters_add_stream or tb_counters_take_stream; NULL
 * and slots that are not in this process's file (a take_stream `own`) are
 * ignored.  The owner thread must have stopped counting into it. */
void tb_counters_remove_stream(tb_counter_slot_t *slot);

/*
 * Records a memory registration for the audit (tb-doctor --audit): call it
 * right after ibv_reg_mr succeeds, with the access flags given to it, e.g.
 *
 *	r->ring_rec = tb_counters_mr_add(cfg->id, TB_ROLE_SUBSCRIBER,
 *			TB_MR_RING_RX, "rc", r->ring_mr, access);
 *
 * (`mr` is a struct ibv_mr *, read for addr, length, lkey and rkey; the
 * macro keeps this header free of verbs headers).  Returns the record, or
 * NULL (no file, all TB_COUNTERS_MRS taken: a warning says so); every
 * other tb_counters_mr_* call accepts NULL, so a registration never fails
 * because of the audit.
 */
tb_counter_mr_t *tb_counters_mr_add_raw(uint32_t stream_id,
					tb_counter_role_t role, tb_mr_use_t use,
					const char *transport, const void *addr,
					uint64_t length, uint32_t access,
					uint32_t lkey, uint32_t rkey);
#define tb_counters_mr_add(stream_id, role, use, transport, mr, access)     \
	tb_counters_mr_add_raw((stream_id), (role), (use), (transport),      \
			       (mr)->addr, (uint64_t)(mr)->length, (access), \
			       (mr)->lkey, (mr)->rkey)

/* Records that the record's rkey was handed to `peer` (an address, a QP
 * number: whatever names it in a log).  Call it where the key is sent. */
void tb_counters_mr_peer(tb_counter_mr_t *mr, const char *peer);

/* Forgets a record; call it right before ibv_dereg_mr.  NULL: no-op. */
void tb_counters_mr_remove(tb_counter_mr_t *mr);

/* A histogram to export, with zeroed counts; `name` is [a-z0-9_] (others
 * become '_'), truncated to 47 characters.  NULL with a warning when there
 * is no room; tb_counter_hist_record(NULL, ..) is a no-op. */
tb_counter_hist_t *tb_counters_hist_add(uint32_t stream_id,
					tb_counter_role_t role,
					const char *name);

/* Stops exporting `h`; its owner must have stopped recording.  NULL: no-op. */
void tb_counters_hist_remove(tb_counter_hist_t *h);

/* "ring_tx", "ring_rx", "credit", "send", "recv", "replay"; "?" otherwise. */
const char *tb_mr_use_name(int use);

/* Names of the IBV_ACCESS_* bits set in `access`, '|'-separated, into
 * `buf` ("LOCAL_WRITE|REMOTE_WRITE"; "none" for 0).  Returns buf. */
const char *tb_mr_access_str(uint32_t access, char *buf, size_t len);

/* The IBV_ACCESS_* values (verbs.h's, copied so that this header and its
 * readers need no verbs headers; counters.c checks they agree). */
#define TB_MR_LOCAL_WRITE 0x1u
#define TB_MR_REMOTE_WRITE 0x2u
#define TB_MR_REMOTE_READ 0x4u
#define TB_MR_REMOTE_ATOMIC 0x8u
#define TB_MR_MW_BIND 0x10u

/* Records "alive now" for readers; cheap (one clock read, one store). */
void tb_counters_heartbeat(void);

/* Unmaps and removes this process's file.  TB_EBUSY while streams remain;
 * 0 when done or when there was no file. */
int tb_counters_close(void);

/* Path of this process's file, or "" when it has none. */
const char *tb_counters_path(void);

/* "published", "delivered", ...; "?" for an unknown index. */
const char *tb_counter_name(int id);
/* "publisher", "subscriber", "recovery"; "?" otherwise. */
const char *tb_counter_role_name(int role);

/* ------------------------------------------------------------- reading */

/* A consistent copy of one stream slot. */
typedef struct tb_counters_stream {
	uint32_t stream_id;
	uint32_t role;
	char name[64];
	char transport[16];
	uint64_t c[TB_CTR_CAPACITY]; /* beyond n_counters: 0 */
} tb_counters_stream_t;

/* A consistent copy of one memory-registration record. */
typedef struct tb_counters_mr {
	uint32_t stream_id;
	uint32_t role;
	uint32_t use;
	uint32_t access;
	uint64_t addr;
	uint64_t length;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t n_peers;
	char peer[64];
	char transport[8];
} tb_counters_mr_t;

/* A copy of one exported histogram. */
typedef struct tb_counters_hist {
	uint32_t stream_id;
	uint32_t role;
	char name[48];
	uint64_t sum_ns;
	uint64_t count; /* the sum of b[] */
	uint64_t b[TB_COUNTERS_HIST_BUCKETS];
} tb_counters_hist_t;

/* A copy of one process's file. */
typedef struct tb_counters_proc {
	pid_t pid;
	char path[TB_PATH_MAX];
	char name[64];
	uint64_t start_ticks;
	uint64_t start_ns;
	uint64_t heartbeat_ns;
	uint32_t n_counters;
	int n_streams; /* active slots copied into streams[] */
	int n_mrs;     /* active records copied into mrs[] */
	int n_hists;   /* active histograms copied into hists[] */
	tb_counters_stream_t streams[TB_COUNTERS_MAX_SLOTS];
	tb_counters_mr_t mrs[TB_COUNTERS_MAX_MRS];
	tb_counters_hist_t hists[TB_COUNTERS_MAX_HISTS];
} tb_counters_proc_t;

/* Called once per live process; return 0 to go on, non-zero to stop. */
typedef int (*tb_counters_fn)(void *arg, const tb_counters_proc_t *proc);

#define TB_COUNTERS_DELETE_STALE 0x1u /* remove files of dead processes */

/*
 * Reads one counters file into `out`: maps it read-only, checks version,
 * magic, sizes and slot count before touching anything else.  Does not
 * judge liveness.  Returns 0, TB_EFORMAT (corrupt, truncated, other
 * version, still being created) or TB_ENOENT/TB_ESYS, with a message.
 */
int tb_counters_read_file(const char *path, tb_counters_proc_t *out);

/*
 * Calls `fn` for each live process's file in `dir` (NULL: $TICKBUS_COUNTERS_
 * DIR or /dev/shm).  Files of dead processes (kill(pid, 0) fails with ESRCH,
 * or the pid now belongs to a process with another start time) are skipped,
 * and removed with TB_COUNTERS_DELETE_STALE (`*reaped`, when not NULL,
 * counts the files removed); unreadable or corrupt files are skipped.
 * Returns the number of processes passed to `fn`, or a TB_E* code.
 */
int tb_counters_read_dir(const char *dir, unsigned flags, tb_counters_fn fn,
			 void *arg);
int tb_counters_read_dir_reap(const char *dir, unsigned flags,
			      tb_counters_fn fn, void *arg, int *reaped);

#endif
