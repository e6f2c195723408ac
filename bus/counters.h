/*
 * counters.h - per-process counters that tools read while the process runs.
 *
 * Each process that publishes or subscribes keeps one small shared-memory
 * file, /dev/shm/tickbus-counters.<pid> ($TICKBUS_COUNTERS_DIR overrides the
 * directory): a header, then TB_COUNTERS_SLOTS stream slots.  Tools
 * (tb-stat, tb-doctor) find the files with tb_counters_read_dir() and read
 * them without disturbing the writer.
 *
 * Threads:
 *   tb_counters_open/add/take/remove_stream/close   any thread (a mutex)
 *   tb_counter_add/inc on a slot    the one thread that owns the slot
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
#define TB_COUNTERS_VERSION 2u /* 2: 32 counters a slot */
/* Slots a process creates: 64 streams per process is far beyond a feed
 * handler's or a strategy's needs, and the file stays at 24.1 KiB. */
#define TB_COUNTERS_SLOTS 64
/* Largest slot count a reader accepts, so a corrupt header cannot make it
 * walk far. */
#define TB_COUNTERS_MAX_SLOTS 256
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
	uint8_t pad0[8];               /*  56 */
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
	tb_counters_stream_t streams[TB_COUNTERS_MAX_SLOTS];
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
 * and removed with TB_COUNTERS_DELETE_STALE; unreadable or corrupt files are
 * skipped.  Returns the number of processes passed to `fn`, or a TB_E* code.
 */
int tb_counters_read_dir(const char *dir, unsigned flags, tb_counters_fn fn,
			 void *arg);

#endif
