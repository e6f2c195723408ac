/*
 * config.c - stream configuration: defaults, validation, INI files.
 *
 * A stream is a tb_stream_cfg_t.  tb_stream_cfg_init() fills the defaults,
 * tb_stream_cfg_validate() checks a struct filled by hand, and
 * tb_config_load() reads a file of [stream NAME] sections into an array of
 * validated structs.  One table, `keys` below, describes every key once: its
 * field, its kind, its range, the transports it applies to and those that
 * require it.  The file parser and tb_stream_cfg_validate() both walk that
 * table and share the range checks, so a file and a struct can never be held
 * to different rules.
 *
 * File format
 *   # comment            ; comment      (whole lines; "value ; note" also
 *                                         works, inih's inline comment)
 *   [stream NAME]        NAME: 1..63 of A-Z a-z 0-9 _ . -, unique in the file
 *   key = value          (or key: value); values are not quoted
 * Any other section is an error, so is a key before the first section, an
 * unknown key, a key given twice in a section, and a key that does not apply
 * to the stream's transport (a `group` on a shm stream is a mistake, not
 * something to ignore silently).  Indentation is ignored.  A file must hold
 * at least one stream: an empty file is almost certainly the wrong file.
 *
 * Keys (transports the key applies to)   values               default
 *   id                     1..4294967295, unique in the file    required
 *   transport              shm | rc | ud | udp                  required
 *   ring_size              power of two, 64K..1G bytes          4M
 *   publisher_core         CPU number 0..CPUs-1, or none        none
 *   subscriber_core        CPU number 0..CPUs-1, or none        none
 *   idle                   busy-spin | spin-then-yield | backoff
 *                                                               spin-then-yield
 *   slow_consumer          lap | backpressure                   lap
 *   token                  1..127 printable ASCII, no spaces    none
 *   recovery               host:port[,host:port]..., at most 4  none
 *   heartbeat_ms           1..60000                             100
 *   liveness_timeout_ms    2*heartbeat_ms..600000               1000
 *   retention              messages kept, 0..100000000          0 = off
 *   retention_endpoint     host:port the publisher serves them on  none
 *   recovery_buffer        power of two, 64K..1G bytes          4M
 *   recovery_timeout_ms    100..600000                          5000
 *   shm_path     (shm)     absolute path                /dev/shm/tickbus.NAME
 *   shm_mode     (shm)     octal mode, owner rw, no group/other write
 *                                                       0600, 0640 with shm_group
 *   shm_group    (shm)     group name or gid             none
 *   control      (rc ud udp) publisher host:port        required for rc
 *   rdma_device  (rc ud)   device name                  first active device
 *   rdma_port    (rc ud)   0..255                       0 = first active
 *   gid_index    (rc ud)   -1..255                      -1 = RoCEv2 IPv4 GID
 *   rdma_traffic_class (rc ud) 0..255 (RoCE: DSCP << 2 | ECN)  106 = DSCP 26
 *   rdma_timeout (rc)      1..31 (4.096 us * 2^n)       12 = 16.8 ms
 *   rdma_retry   (rc)      0..7                         7
 *   rdma_sl      (rc)      0..15 (InfiniBand)           0
 *   group        (ud udp)  IPv4 multicast host:port     required
 *   interface    (ud udp)  local address or netdev      system's choice
 *   ttl          (ud udp)  0..255                       1
 *   loopback     (ud udp)  yes | no | true | false | 1 | 0   yes
 *   mtu          (ud udp)  0 or 256..65507              0 = path MTU
 *   batch_us     (rc ud udp) 0..1000000                 0 = send at once
 *                (rc: frames held per subscriber and posted as one chain,
 *                 at most 16, at tb_pub_flush or at the first send once
 *                 the oldest is this old)
 *   rcvbuf       (udp)     bytes, 0..1G                 0 = system's
 *   recv_depth   (ud)      receive buffers, 0 or 256..1048576
 *                                              0 = 4096, at most the device's
 *   sources      (sources) names of streams in the file, at most 4    none
 *   sources_wait_us (sources) 0..1000000                      1000
 * A stream with `sources` is one stream taken from several copies (hot
 * failover, tb_subscriber_open_sources): it has no transport, and of the
 * keys above takes id, subscriber_core, idle, token, recovery,
 * recovery_buffer, recovery_timeout_ms and sources_wait_us ("applies to
 * sources" below).  Each source is an ordinary stream of the same file,
 * listed once, with no sources of its own, and carries the id of the
 * stream that lists it: the one exception to unique ids, and the reason
 * ids and sources are checked once the whole file is read.
 * Integers are decimal and parsed strictly: no sign where the key is
 * unsigned, no trailing text, no overflow.  Sizes take K, M or G (x1024).
 * Choice words are matched without regard to case.  A host is a name, an
 * IPv4 address, or an IPv6 address in brackets ([::1]:7000).  A line holds
 * at most 199 characters (inih's buffer; see below), which bounds shm_path
 * and recovery lists in a file below what the struct could hold.
 *
 * Errors: the first one in the file wins, and every message says where:
 *   "<file>:<line>: key '<key>': <what is wrong>; allowed: <what is allowed>"
 *   "<file>:<line>: section '[...]': ..."
 *   "<file>: stream '<name>': missing required key '<key>'"
 * What a message quotes from the file is escaped (escape(): \xNN for
 * control characters, DEL, C1 controls, bidirectional overrides and bytes
 * that are not UTF-8, \\ for a backslash): a file cannot send a terminal
 * escape sequence to whoever reads the message.
 *
 * Reading.  The file is read whole, then parsed from memory
 * (tb_config_load_buffer, which the fuzz target calls too).  Only a regular
 * file of at most TB_CONFIG_FILE_MAX (1 MiB) is read: it is opened with
 * O_NONBLOCK (a FIFO without a writer would block open(2) forever) and
 * checked with fstat before a byte is read, so /dev/zero, a FIFO, a
 * directory or a huge file is refused at once, naming the file.
 *
 * Line numbers and libinih.  Debian builds inih without INI_HANDLER_LINENO
 * (the handler gets no line number, and defining the macro here would not
 * change the library's calling convention), with a 200-byte line buffer
 * that silently splits a longer line in two, with section names cut at 50
 * bytes, and with Python-style continuation lines.  So the file is fed to
 * ini_parse_stream() through our own reader, next_line(), which
 *   - counts lines.  inih calls the reader once per line and calls the
 *     handler for that line before it reads the next one, so in the handler
 *     the reader's count is the line of the key;
 *   - refuses a line longer than inih's buffer instead of letting it split;
 *   - strips leading blanks, so an indented line is a key, never a
 *     continuation of the previous value;
 *   - parses section headers itself (full names, strict syntax) and tracks
 *     the current stream; the handler ignores inih's copy of the section;
 *   - returns end-of-file once an error is recorded, so parsing stops at the
 *     first error.
 * inih still splits "key = value", strips blanks and inline comments, and
 * reports lines that are neither (it returns the first such line number).
 */
#include "bus/config.h"
#include "bus/error.h"
#include "bus/ring.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

#define RING_MIN TB_RING_MIN /* bus/ring.h */
#define RING_MAX TB_RING_MAX
#define RING_DEFAULT (4 * MIB)

/* Largest UDP payload over IPv4: 65535 - 20 (IP) - 8 (UDP). */
#define MTU_MAX 65507
/* Below this a datagram header and one frame do not fit usefully. */
#define MTU_MIN 256

/* Why a parse failed, before the key and the allowed values are added. */
#define WHY_MAX 320
/* Text quoted from a file, escaped for a message (escape()): a 199-byte
 * line of control bytes is 796 characters; a message holds 511. */
#define SHOWN_MAX 512

/* ------------------------------------------------------------ key table */

enum kind {
	K_U32,       /* uint32_t, decimal, range lo..hi */
	K_INT,       /* int, decimal (may be negative when lo < 0) */
	K_CORE,      /* int: "none" (-1) or a CPU number */
	K_SIZE,      /* uint64_t or uint32_t bytes, optional K/M/G suffix */
	K_ENUM,      /* int-sized enum, one of `words` */
	K_BOOL,      /* int 0 or 1 */
	K_TEXT,      /* char[]: printable ASCII, no spaces */
	K_PATH,      /* char[]: absolute path */
	K_ENDPOINT,  /* tb_endpoint_t */
	K_GROUP,     /* tb_endpoint_t, IPv4 multicast */
	K_ENDPOINTS, /* tb_endpoint_t[TB_RECOVERY_MAX] + n_recovery */
	K_MODE,      /* uint32_t file mode, octal: owner rw, no group/other w */
	K_NAMES,     /* char[TB_SOURCES_MAX][TB_NAME_MAX] + n_sources */
};

#define F_ZERO_OK 1u  /* 0 is allowed besides lo..hi ("off") */
#define F_POW2 2u     /* must be a power of two */
#define F_ZERO_UNSET 4u /* 0 in a struct means "not given" (id) */

#define T_SHM (1u << TB_TRANSPORT_SHM)
#define T_RC (1u << TB_TRANSPORT_RC)
#define T_UD (1u << TB_TRANSPORT_UD)
#define T_UDP (1u << TB_TRANSPORT_UDP)
#define T_ALL (T_SHM | T_RC | T_UD | T_UDP)
/* Not a transport: a stream of sources (see above). */
#define T_SRC (1u << 4)

struct key_spec {
	const char *name;
	enum kind kind;
	size_t off, size;         /* the field in tb_stream_cfg_t */
	int64_t lo, hi;           /* numeric kinds */
	unsigned flags;           /* F_* */
	unsigned applies;         /* T_*: transports the key means something to */
	unsigned required;        /* T_*: transports that need it */
	const char *const *words; /* K_ENUM: names by value, NULL-terminated */
};

static const char *const transport_words[] = {"shm", "rc", "ud", "udp", NULL};
static const char *const idle_words[] = {"busy-spin", "spin-then-yield",
					 "backoff", NULL};
static const char *const slow_words[] = {"lap", "backpressure", NULL};

_Static_assert(TB_TRANSPORT_SHM == 0 && TB_TRANSPORT_RC == 1 &&
	       TB_TRANSPORT_UD == 2 && TB_TRANSPORT_UDP == 3,
	       "transport_words is indexed by tb_transport_t");
_Static_assert(TB_IDLE_BUSY_SPIN == 0 && TB_IDLE_SPIN_YIELD == 1 &&
	       TB_IDLE_BACKOFF == 2, "idle_words is indexed by tb_idle_kind_t");
_Static_assert(TB_SLOW_LAP == 0 && TB_SLOW_BACKPRESSURE == 1,
	       "slow_words is indexed by tb_slow_policy_t");
_Static_assert(sizeof(tb_transport_t) == sizeof(int) &&
	       sizeof(tb_idle_kind_t) == sizeof(int) &&
	       sizeof(tb_slow_policy_t) == sizeof(int),
	       "enum fields are read and written as int");

#define FIELD(f) offsetof(tb_stream_cfg_t, f), sizeof(((tb_stream_cfg_t *)0)->f)

enum key_index {
	KEY_ID,
	KEY_TRANSPORT,
	KEY_RING_SIZE,
	KEY_PUBLISHER_CORE,
	KEY_SUBSCRIBER_CORE,
	KEY_IDLE,
	KEY_SLOW_CONSUMER,
	KEY_TOKEN,
	KEY_RECOVERY,
	KEY_HEARTBEAT_MS,
	KEY_LIVENESS_TIMEOUT_MS,
	KEY_RETENTION,
	KEY_RETENTION_ENDPOINT,
	KEY_RECOVERY_BUFFER,
	KEY_RECOVERY_TIMEOUT_MS,
	KEY_SHM_PATH,
	KEY_SHM_MODE,
	KEY_SHM_GROUP,
	KEY_CONTROL,
	KEY_RDMA_DEVICE,
	KEY_RDMA_PORT,
	KEY_GID_INDEX,
	KEY_RDMA_TRAFFIC_CLASS,
	KEY_RDMA_TIMEOUT,
	KEY_RDMA_RETRY,
	KEY_RDMA_SL,
	KEY_GROUP,
	KEY_INTERFACE,
	KEY_TTL,
	KEY_LOOPBACK,
	KEY_MTU,
	KEY_BATCH_US,
	KEY_RCVBUF,
	KEY_RECV_DEPTH,
	KEY_SOURCES,
	KEY_SOURCES_WAIT_US,
	N_KEYS
};

static const struct key_spec keys[N_KEYS] = {
	/*                 name                  kind         field
	 *                 lo        hi         flags         applies  required */
	[KEY_ID] = {"id", K_U32, FIELD(id),
		1, UINT32_MAX, F_ZERO_UNSET, T_ALL | T_SRC, T_ALL | T_SRC, NULL},
	[KEY_TRANSPORT] = {"transport", K_ENUM, FIELD(transport),
		0, 3, 0, T_ALL, T_ALL, transport_words},
	[KEY_RING_SIZE] = {"ring_size", K_SIZE, FIELD(ring_size),
		RING_MIN, RING_MAX, F_POW2, T_ALL, 0, NULL},
	[KEY_PUBLISHER_CORE] = {"publisher_core", K_CORE, FIELD(publisher_core),
		-1, 0, 0, T_ALL, 0, NULL},
	[KEY_SUBSCRIBER_CORE] = {"subscriber_core", K_CORE,
		FIELD(subscriber_core), -1, 0, 0, T_ALL | T_SRC, 0, NULL},
	[KEY_IDLE] = {"idle", K_ENUM, FIELD(idle),
		0, 2, 0, T_ALL | T_SRC, 0, idle_words},
	[KEY_SLOW_CONSUMER] = {"slow_consumer", K_ENUM, FIELD(slow_consumer),
		0, 1, 0, T_ALL, 0, slow_words},
	[KEY_TOKEN] = {"token", K_TEXT, FIELD(token),
		0, 0, 0, T_ALL | T_SRC, 0, NULL},
	[KEY_RECOVERY] = {"recovery", K_ENDPOINTS, FIELD(recovery),
		0, 0, 0, T_ALL | T_SRC, 0, NULL},
	[KEY_HEARTBEAT_MS] = {"heartbeat_ms", K_U32, FIELD(heartbeat_ms),
		1, 60000, 0, T_ALL, 0, NULL},
	[KEY_LIVENESS_TIMEOUT_MS] = {"liveness_timeout_ms", K_U32,
		FIELD(liveness_timeout_ms), 2, 600000, 0, T_ALL, 0, NULL},
	[KEY_RETENTION] = {"retention", K_U32, FIELD(retention),
		0, 100000000, 0, T_ALL, 0, NULL},
	[KEY_RETENTION_ENDPOINT] = {"retention_endpoint", K_ENDPOINT,
		FIELD(retention_endpoint), 0, 0, 0, T_ALL, 0, NULL},
	[KEY_RECOVERY_BUFFER] = {"recovery_buffer", K_SIZE,
		FIELD(recovery_buffer), RING_MIN, RING_MAX, F_POW2, T_ALL | T_SRC,
		0, NULL},
	[KEY_RECOVERY_TIMEOUT_MS] = {"recovery_timeout_ms", K_U32,
		FIELD(recovery_timeout_ms), 100, 600000, 0, T_ALL | T_SRC, 0, NULL},
	[KEY_SHM_PATH] = {"shm_path", K_PATH, FIELD(shm_path),
		0, 0, 0, T_SHM, 0, NULL},
	[KEY_SHM_MODE] = {"shm_mode", K_MODE, FIELD(shm_mode),
		0, 0777, F_ZERO_OK, T_SHM, 0, NULL},
	[KEY_SHM_GROUP] = {"shm_group", K_TEXT, FIELD(shm_group),
		0, 0, 0, T_SHM, 0, NULL},
	[KEY_CONTROL] = {"control", K_ENDPOINT, FIELD(control),
		0, 0, 0, T_RC | T_UD | T_UDP, T_RC, NULL},
	[KEY_RDMA_DEVICE] = {"rdma_device", K_TEXT, FIELD(rdma_device),
		0, 0, 0, T_RC | T_UD, 0, NULL},
	[KEY_RDMA_PORT] = {"rdma_port", K_INT, FIELD(rdma_port),
		0, 255, 0, T_RC | T_UD, 0, NULL},
	[KEY_GID_INDEX] = {"gid_index", K_INT, FIELD(gid_index),
		-1, 255, 0, T_RC | T_UD, 0, NULL},
	[KEY_RDMA_TRAFFIC_CLASS] = {"rdma_traffic_class", K_INT,
		FIELD(rdma_traffic_class), 0, 255, 0, T_RC | T_UD, 0, NULL},
	[KEY_RDMA_TIMEOUT] = {"rdma_timeout", K_INT, FIELD(rdma_timeout),
		1, 31, 0, T_RC, 0, NULL},
	[KEY_RDMA_RETRY] = {"rdma_retry", K_INT, FIELD(rdma_retry),
		0, 7, 0, T_RC, 0, NULL},
	[KEY_RDMA_SL] = {"rdma_sl", K_INT, FIELD(rdma_sl),
		0, 15, 0, T_RC, 0, NULL},
	[KEY_GROUP] = {"group", K_GROUP, FIELD(group),
		0, 0, 0, T_UD | T_UDP, T_UD | T_UDP, NULL},
	[KEY_INTERFACE] = {"interface", K_TEXT, FIELD(interface),
		0, 0, 0, T_UD | T_UDP, 0, NULL},
	[KEY_TTL] = {"ttl", K_INT, FIELD(ttl),
		0, 255, 0, T_UD | T_UDP, 0, NULL},
	[KEY_LOOPBACK] = {"loopback", K_BOOL, FIELD(loopback),
		0, 1, 0, T_UD | T_UDP, 0, NULL},
	[KEY_MTU] = {"mtu", K_U32, FIELD(mtu),
		MTU_MIN, MTU_MAX, F_ZERO_OK, T_UD | T_UDP, 0, NULL},
	[KEY_BATCH_US] = {"batch_us", K_U32, FIELD(batch_us),
		0, 1000000, 0, T_RC | T_UD | T_UDP, 0, NULL},
	[KEY_RCVBUF] = {"rcvbuf", K_SIZE, FIELD(rcvbuf),
		0, GIB, 0, T_UDP, 0, NULL},
	[KEY_RECV_DEPTH] = {"recv_depth", K_U32, FIELD(recv_depth),
		256, 1u << 20, F_ZERO_OK, T_UD, 0, NULL},
	[KEY_SOURCES] = {"sources", K_NAMES, FIELD(sources),
		0, 0, 0, T_SRC, 0, NULL},
	[KEY_SOURCES_WAIT_US] = {"sources_wait_us", K_U32, FIELD(sources_wait_us),
		0, 1000000, 0, T_SRC, 0, NULL},
};

_Static_assert(N_KEYS <= 64, "a uint64_t records which keys a section gave");

static const struct key_spec *key_by_name(const char *name)
{
	for (int i = 0; i < N_KEYS; i++)
		if (strcmp(keys[i].name, name) == 0)
			return &keys[i];
	return NULL;
}

/* -------------------------------------------------------------- helpers */

static int whyf(char *why, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int whyf(char *why, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, WHY_MAX, fmt, ap);
	va_end(ap);
	return -1;
}

/* Length of the UTF-8 character at s[0..n) that may be shown as it is, or
 * 0: a malformed, overlong or surrogate sequence, or a character that
 * steers a terminal or the order text is shown in (C1 controls, among them
 * the 8-bit CSI; the bidirectional overrides and isolates). */
static size_t utf8_shown_len(const unsigned char *s, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (s[0] < 0xc2 || s[0] > 0xf4)
		return 0; /* ASCII is the caller's; 0x80..0xc1 never lead */
	len = s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : 4;
	if (n < len)
		return 0;
	cp = s[0] & (0x7f >> len);
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	if (cp <= 0x9f || (cp >= 0x202a && cp <= 0x202e) ||
	    (cp >= 0x2066 && cp <= 0x2069))
		return 0;
	return len;
}

/*
 * Copies s[0..n) into out[0..cap) (NUL-terminated) for a message that
 * quotes a file: printable ASCII and well-formed UTF-8 as they are, a
 * backslash as "\\", and every other byte (control characters, DEL, bytes
 * that are not UTF-8, the characters utf8_shown_len refuses) as \xNN, so
 * that what a file holds cannot drive the terminal the message is printed
 * on, and every byte of it can be told from the message.  Stops at a whole
 * character when out is full.  Returns out.
 */
static char *escape(char *out, size_t cap, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t o = 0, i = 0;

	while (i < n) {
		size_t len = 1;
		char esc[5];
		const char *piece = esc;

		if (u[i] >= 0x20 && u[i] < 0x7f && u[i] != '\\') {
			piece = s + i;
		} else if (u[i] == '\\') {
			memcpy(esc, "\\\\", 3);
			len = 2;
		} else if (u[i] >= 0x80 && (len = utf8_shown_len(u + i, n - i))) {
			piece = s + i;
		} else {
			snprintf(esc, sizeof(esc), "\\x%02x", u[i]);
			len = 4;
		}
		if (o + len >= cap)
			break;
		memcpy(out + o, piece, len);
		o += len;
		i += piece == esc ? 1 : len;
	}
	if (cap)
		out[o] = '\0';
	return out;
}

static long cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_CONF);

	return n > 0 ? n : 1;
}

static void fmt_size(uint64_t v, char *buf, size_t n)
{
	if (v && v % GIB == 0)
		snprintf(buf, n, "%lluG", (unsigned long long)(v / GIB));
	else if (v && v % MIB == 0)
		snprintf(buf, n, "%lluM", (unsigned long long)(v / MIB));
	else if (v && v % KIB == 0)
		snprintf(buf, n, "%lluK", (unsigned long long)(v / KIB));
	else
		snprintf(buf, n, "%llu", (unsigned long long)v);
}

/* transport_words, and "sources" for T_SRC. */
static const char *kind_word(int t)
{
	return t < 4 ? transport_words[t] : "sources";
}

static void fmt_transports(unsigned mask, char *buf, size_t n)
{
	int count = 0, seen = 0;

	for (int t = 0; t < 5; t++)
		count += (mask >> t) & 1;
	buf[0] = '\0';
	for (int t = 0; t < 5; t++) {
		size_t len = strlen(buf);

		if (!(mask & (1u << t)))
			continue;
		seen++;
		snprintf(buf + len, n - len, "%s%s",
			 seen == 1 ? "" : seen == count ? " and " : ", ",
			 kind_word(t));
	}
}

/* What a key accepts, for the "; allowed: ..." half of a message. */
static void describe(const struct key_spec *k, long ncpu, char *buf, size_t n)
{
	char lo[32], hi[32];
	size_t len;

	switch (k->kind) {
	case K_U32:
	case K_INT:
		snprintf(buf, n, "%san integer from %lld to %lld%s",
			 k->flags & F_ZERO_OK ? "0 or " : "", (long long)k->lo,
			 (long long)k->hi,
			 k == &keys[KEY_LIVENESS_TIMEOUT_MS] ? ", and at least twice "
						    "heartbeat_ms" : "");
		break;
	case K_CORE:
		snprintf(buf, n, "a CPU number from 0 to %ld, or none", ncpu - 1);
		break;
	case K_SIZE:
		fmt_size((uint64_t)k->lo, lo, sizeof(lo));
		fmt_size((uint64_t)k->hi, hi, sizeof(hi));
		snprintf(buf, n, "%s from %s to %s bytes, with an optional K, "
			 "M or G suffix (x1024)",
			 k->flags & F_POW2 ? "a power of two" : "a size", lo, hi);
		break;
	case K_ENUM:
		buf[0] = '\0';
		for (int i = 0; k->words[i]; i++) {
			len = strlen(buf);
			snprintf(buf + len, n - len, "%s%s",
				 i == 0 ? "" : k->words[i + 1] ? ", " : " or ",
				 k->words[i]);
		}
		break;
	case K_BOOL:
		snprintf(buf, n, "yes, no, true, false, 1 or 0");
		break;
	case K_TEXT:
		snprintf(buf, n, "1 to %zu printable ASCII characters, no spaces",
			 k->size - 1);
		break;
	case K_PATH:
		snprintf(buf, n, "an absolute path of at most %zu characters",
			 k->size - 1);
		break;
	case K_ENDPOINT:
		snprintf(buf, n, "host:port with a port from 1 to 65535, e.g. "
			 "127.0.0.1:7000 or [::1]:7000");
		break;
	case K_GROUP:
		snprintf(buf, n, "an IPv4 multicast address (224.0.0.0 to "
			 "239.255.255.255) and a port, e.g. 239.1.1.1:5000");
		break;
	case K_ENDPOINTS:
		snprintf(buf, n, "up to %d host:port endpoints separated by "
			 "commas, e.g. 127.0.0.1:7100,127.0.0.1:7101",
			 TB_RECOVERY_MAX);
		break;
	case K_MODE:
		snprintf(buf, n, "an octal file mode such as 0600 or 0640 in "
			 "which the owner reads and writes, and group and "
			 "others may read but never write");
		break;
	case K_NAMES:
		snprintf(buf, n, "1 to %d names of streams in this file, "
			 "separated by commas, e.g. md_a, md_b", TB_SOURCES_MAX);
		break;
	}
}

/* A ring's mode: the owner reads and writes it; nobody else writes it
 * (a reader trusts what only its publisher can change). */
static int check_mode(int64_t v, const char *shown, char *why)
{
	if (v < 0 || v > 0777)
		return whyf(why, "%s is not a file mode", shown);
	if ((v & 0600) != 0600)
		return whyf(why, "%s does not let the owner read and write", shown);
	if (v & 0133)
		return whyf(why, "%s lets group or others write or execute",
			    shown);
	return 0;
}

/* Strict octal: digits 0-7 only, at most four, nothing after. */
static int parse_mode(const char *s, int64_t *out, char *why)
{
	int64_t v = 0;
	size_t len = strlen(s);

	if (len == 0 || len > 4)
		return whyf(why, "'%s' is not an octal mode", s);
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '7')
			return whyf(why, "'%s' is not an octal mode", s);
		v = v * 8 + (*p - '0');
	}
	*out = v;
	return 0;
}

/* Strict decimal: optional '-' only when `signed_ok`, digits, nothing
 * after.  `shown` quotes the text in messages. */
static int parse_int(const char *s, bool signed_ok, int64_t *out,
		     const char **end, char *why)
{
	const char *p = s;
	bool neg = false;
	uint64_t v = 0;

	if (*p == '-' && isdigit((unsigned char)p[1])) {
		if (!signed_ok)
			return whyf(why, "'%s' is negative", s);
		neg = true;
		p++;
	}
	if (!isdigit((unsigned char)*p))
		return whyf(why, "'%s' is not a decimal integer", s);
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');

		if (v > ((uint64_t)INT64_MAX - d) / 10)
			return whyf(why, "'%s' is too large", s);
		v = v * 10 + d;
	}
	if (end)
		*end = p;
	else if (*p)
		return whyf(why, "'%s' is not a decimal integer", s);
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

static int parse_size(const char *s, int64_t *out, char *why)
{
	const char *suffix;
	uint64_t mult = 1;
	int64_t v;

	if (parse_int(s, false, &v, &suffix, why))
		return -1;
	if (*suffix) {
		if (suffix[1] == '\0' && (*suffix == 'K' || *suffix == 'k'))
			mult = KIB;
		else if (suffix[1] == '\0' && (*suffix == 'M' || *suffix == 'm'))
			mult = MIB;
		else if (suffix[1] == '\0' && (*suffix == 'G' || *suffix == 'g'))
			mult = GIB;
		else
			return whyf(why, "'%s' has an unknown suffix '%s'", s,
				    suffix);
	}
	if ((uint64_t)v > (uint64_t)INT64_MAX / mult)
		return whyf(why, "'%s' is too large", s);
	*out = v * (int64_t)mult;
	return 0;
}

/* The range rules of a numeric key, shared by the parser and
 * tb_stream_cfg_validate. */
static int check_number(const struct key_spec *k, int64_t v,
			const char *shown, long ncpu, char *why)
{
	if (k->kind == K_CORE) {
		if (v == -1 || (v >= 0 && v < ncpu))
			return 0;
		return whyf(why, "%s is not a CPU of this machine (it has %ld)",
			    shown, ncpu);
	}
	if ((k->flags & F_ZERO_OK) && v == 0)
		return 0;
	if (v < k->lo || v > k->hi)
		return whyf(why, "%s is out of range", shown);
	if ((k->flags & F_POW2) && (v & (v - 1)))
		return whyf(why, "%s is not a power of two", shown);
	return 0;
}

/* ASCII only, whatever the locale: A-Z a-z 0-9 _ . - */
static bool is_name_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

static bool valid_stream_name(const char *s, size_t len)
{
	if (len == 0 || len >= TB_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!is_name_char((unsigned char)s[i]))
			return false;
	return true;
}

/* A host as stored in tb_endpoint_t: a name, a dotted IPv4 address, or an
 * IPv6 address (written in brackets in a file, stored without). */
static int check_host(const char *host, const char *shown, char *why)
{
	size_t len = strlen(host);
	bool dotted = true;
	unsigned char addr[16];

	if (len == 0)
		return whyf(why, "%s has an empty host", shown);
	if (len >= TB_HOST_MAX)
		return whyf(why, "%s has a host longer than %d characters",
			    shown, TB_HOST_MAX - 1);
	if (strchr(host, ':')) {
		if (inet_pton(AF_INET6, host, addr) != 1)
			return whyf(why, "%s: '%s' is not an IPv6 address",
				    shown, host);
		return 0;
	}
	for (size_t i = 0; i < len; i++) {
		if (!is_name_char((unsigned char)host[i]))
			return whyf(why, "%s: host '%s' has a character that "
				    "is not allowed in a host name", shown,
				    host);
		if (!isdigit((unsigned char)host[i]) && host[i] != '.')
			dotted = false;
	}
	if (dotted && inet_pton(AF_INET, host, addr) != 1)
		return whyf(why, "%s: '%s' is not an IPv4 address", shown, host);
	return 0;
}

static int parse_endpoint(const char *s, tb_endpoint_t *ep, char *why)
{
	const char *host = s, *port_s;
	size_t host_len;
	int64_t port;
	char shown[WHY_MAX];

	snprintf(shown, sizeof(shown), "'%s'", s);
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close)
			return whyf(why, "%s has '[' without ']'", shown);
		if (close[1] != ':')
			return whyf(why, "%s has no ':port' after ']'", shown);
		host = s + 1;
		host_len = (size_t)(close - host);
		port_s = close + 2;
		if (memchr(host, ':', host_len) == NULL)
			return whyf(why, "%s: brackets are for IPv6 addresses",
				    shown);
	} else {
		const char *colon = strrchr(s, ':');

		if (!colon)
			return whyf(why, "%s has no ':port'", shown);
		host_len = (size_t)(colon - s);
		if (memchr(s, ':', host_len))
			return whyf(why, "%s has more than one ':'; write an "
				    "IPv6 address in brackets, e.g. [::1]:7000",
				    shown);
		port_s = colon + 1;
	}
	if (host_len >= TB_HOST_MAX)
		return whyf(why, "%s has a host longer than %d characters",
			    shown, TB_HOST_MAX - 1);
	memcpy(ep->host, host, host_len);
	ep->host[host_len] = '\0';
	if (check_host(ep->host, shown, why))
		return -1;
	if (*port_s == '\0')
		return whyf(why, "%s has an empty port", shown);
	if (parse_int(port_s, false, &port, NULL, why))
		return whyf(why, "%s: port '%s' is not a decimal integer",
			    shown, port_s);
	if (port < 1 || port > 65535)
		return whyf(why, "%s: port %s is out of range", shown, port_s);
	ep->port = (uint16_t)port;
	return 0;
}

static int check_endpoint(const tb_endpoint_t *ep, const char *shown,
			  char *why)
{
	if (!memchr(ep->host, '\0', sizeof(ep->host)))
		return whyf(why, "%s: host is not NUL-terminated", shown);
	if (check_host(ep->host, shown, why))
		return -1;
	if (ep->port == 0)
		return whyf(why, "%s: port 0 is out of range", shown);
	return 0;
}

static int check_group(const tb_endpoint_t *ep, const char *shown, char *why)
{
	struct in_addr a;

	if (inet_pton(AF_INET, ep->host, &a) != 1)
		return whyf(why, "%s: '%s' is not a numeric IPv4 address",
			    shown, ep->host);
	if ((ntohl(a.s_addr) >> 28) != 0xe)
		return whyf(why, "%s: '%s' is not a multicast address", shown,
			    ep->host);
	return 0;
}

static int check_text(const struct key_spec *k, const char *s,
		      const char *shown, char *why)
{
	size_t len = strnlen(s, k->size);

	if (len == k->size)
		return whyf(why, "%s is longer than %zu characters", shown,
			    k->size - 1);
	if (k->kind == K_PATH) {
		if (s[0] != '/')
			return whyf(why, "%s is not an absolute path", shown);
		for (size_t i = 0; i < len; i++)
			if (iscntrl((unsigned char)s[i]))
				return whyf(why, "%s contains a control "
					    "character", shown);
		return 0;
	}
	if (len == 0)
		return whyf(why, "%s is empty", shown);
	for (size_t i = 0; i < len; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return whyf(why, "%s contains a space or a character "
				    "that is not printable ASCII", shown);
	return 0;
}

static void store_int(void *field, size_t size, int64_t v)
{
	if (size == sizeof(uint64_t)) {
		uint64_t u = (uint64_t)v;
		memcpy(field, &u, size);
	} else if (size == sizeof(uint32_t)) {
		/* uint32_t and int fields: the value was range-checked */
		uint32_t u = (uint32_t)v;
		memcpy(field, &u, size);
	}
}

static int64_t load_int(const struct key_spec *k, const void *field)
{
	if (k->size == sizeof(uint64_t)) {
		uint64_t u;

		memcpy(&u, field, sizeof(u));
		return u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
	}
	if (k->kind == K_U32 || k->kind == K_SIZE) {
		uint32_t u;

		memcpy(&u, field, sizeof(u));
		return u;
	}
	int i;

	memcpy(&i, field, sizeof(i));
	return i;
}

/* A list of stream names (the sources key): each a valid name, none twice.
 * Whether they name streams of the file is known only at its end. */
static int parse_names(tb_stream_cfg_t *cfg, const char *text,
		       const char *shown, char *why)
{
	char names[TB_SOURCES_MAX][TB_NAME_MAX];
	const char *p = text;
	int n = 1;

	for (const char *c = text; *c; c++)
		n += *c == ',';
	if (n > TB_SOURCES_MAX)
		return whyf(why, "%s lists %d streams, more than %d", shown, n,
			    TB_SOURCES_MAX);
	memset(names, 0, sizeof(names));
	for (int i = 0; i < n; i++) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);

		while (len && isspace((unsigned char)*p))
			p++, len--;
		while (len && isspace((unsigned char)p[len - 1]))
			len--;
		if (len == 0)
			return whyf(why, "%s has an empty entry %d", shown, i + 1);
		if (!valid_stream_name(p, len))
			return whyf(why, "entry %d, '%.*s', is not a stream name",
				    i + 1, (int)len, p);
		memcpy(names[i], p, len);
		for (int j = 0; j < i; j++)
			if (strcmp(names[j], names[i]) == 0)
				return whyf(why, "%s names '%s' twice", shown,
					    names[i]);
		p = comma ? comma + 1 : p + len;
	}
	memcpy(cfg->sources, names, sizeof(names));
	cfg->n_sources = n;
	return 0;
}

/* Parses `text` into the field of key `k`.  Returns 0, or -1 with what is
 * wrong in `why`. */
static int parse_value(const struct key_spec *k, tb_stream_cfg_t *cfg,
		       const char *text, long ncpu, char *why)
{
	char *field = (char *)cfg + k->off;
	char shown[WHY_MAX];
	int64_t v = 0;

	snprintf(shown, sizeof(shown), "'%s'", text);
	switch (k->kind) {
	case K_U32:
	case K_INT:
	case K_CORE:
		if (k->kind == K_CORE && strcasecmp(text, "none") == 0)
			v = -1;
		else if (parse_int(text, k->lo < 0 && k->kind != K_CORE, &v,
				   NULL, why))
			return -1;
		if (check_number(k, v, shown, ncpu, why))
			return -1;
		store_int(field, k->size, v);
		return 0;
	case K_SIZE:
		if (parse_size(text, &v, why) ||
		    check_number(k, v, shown, ncpu, why))
			return -1;
		store_int(field, k->size, v);
		return 0;
	case K_ENUM:
		for (int i = 0; k->words[i]; i++) {
			if (strcasecmp(text, k->words[i]) == 0) {
				store_int(field, k->size, i);
				return 0;
			}
		}
		return whyf(why, "%s is not one of the choices", shown);
	case K_BOOL:
		if (!strcasecmp(text, "yes") || !strcasecmp(text, "true") ||
		    !strcmp(text, "1"))
			v = 1;
		else if (!strcasecmp(text, "no") || !strcasecmp(text, "false") ||
			 !strcmp(text, "0"))
			v = 0;
		else
			return whyf(why, "%s is not a yes/no value", shown);
		store_int(field, k->size, v);
		return 0;
	case K_TEXT:
	case K_PATH:
		if (strlen(text) >= k->size)
			return whyf(why, "%s is %zu characters long, more than "
				    "%zu", shown, strlen(text), k->size - 1);
		if (check_text(k, text, shown, why))
			return -1;
		memcpy(field, text, strlen(text) + 1);
		return 0;
	case K_ENDPOINT:
	case K_GROUP: {
		tb_endpoint_t ep = {{0}, 0};

		if (parse_endpoint(text, &ep, why))
			return -1;
		if (k->kind == K_GROUP && check_group(&ep, shown, why))
			return -1;
		memcpy(field, &ep, sizeof(ep));
		return 0;
	}
	case K_ENDPOINTS: {
		tb_endpoint_t eps[TB_RECOVERY_MAX];
		const char *p = text;
		int n = 1;

		for (const char *c = text; *c; c++)
			n += *c == ',';
		if (n > TB_RECOVERY_MAX)
			return whyf(why, "%s lists %d endpoints, more than %d",
				    shown, n, TB_RECOVERY_MAX);
		for (int i = 0; i < n; i++) {
			const char *comma = strchr(p, ',');
			size_t len = comma ? (size_t)(comma - p) : strlen(p);
			char item[WHY_MAX], inner[WHY_MAX];

			while (len && isspace((unsigned char)*p))
				p++, len--;
			while (len && isspace((unsigned char)p[len - 1]))
				len--;
			if (len == 0)
				return whyf(why, "%s has an empty entry %d",
					    shown, i + 1);
			snprintf(item, sizeof(item), "%.*s", (int)len, p);
			memset(&eps[i], 0, sizeof(eps[i]));
			if (parse_endpoint(item, &eps[i], inner))
				return whyf(why, "entry %d: %s", i + 1, inner);
			p = comma ? comma + 1 : p + len;
		}
		memset(cfg->recovery, 0, sizeof(cfg->recovery));
		memcpy(cfg->recovery, eps, (size_t)n * sizeof(eps[0]));
		cfg->n_recovery = n;
		return 0;
	}
	case K_MODE:
		if (parse_mode(text, &v, why) || check_mode(v, shown, why))
			return -1;
		store_int(field, k->size, v);
		return 0;
	case K_NAMES:
		return parse_names(cfg, text, shown, why);
	}
	return whyf(why, "internal error: key kind %d", (int)k->kind);
}

/* Checks the field of key `k` in a struct.  Fields that are optional and
 * unset (an empty string or endpoint) pass. */
static int check_value(const struct key_spec *k, const tb_stream_cfg_t *cfg,
		       long ncpu, char *why)
{
	const char *field = (const char *)cfg + k->off;
	char shown[TB_HOST_MAX + 32];
	int64_t v;

	switch (k->kind) {
	case K_U32:
	case K_INT:
	case K_CORE:
	case K_SIZE:
		v = load_int(k, field);
		snprintf(shown, sizeof(shown), "%lld", (long long)v);
		return check_number(k, v, shown, ncpu, why);
	case K_ENUM:
	case K_BOOL:
		v = load_int(k, field);
		if (v < k->lo || v > k->hi)
			return whyf(why, "%lld is not a valid value",
				    (long long)v);
		return 0;
	case K_TEXT:
	case K_PATH:
		if (field[0] == '\0')
			return 0;
		return check_text(k, field, "the value", why);
	case K_ENDPOINT:
	case K_GROUP: {
		const tb_endpoint_t *ep = (const tb_endpoint_t *)field;

		if (ep->host[0] == '\0' && ep->port == 0)
			return 0;
		snprintf(shown, sizeof(shown), "'%.*s:%u'", TB_HOST_MAX - 1,
			 ep->host, ep->port);
		if (check_endpoint(ep, shown, why))
			return -1;
		return k->kind == K_GROUP ? check_group(ep, shown, why) : 0;
	}
	case K_ENDPOINTS:
		if (cfg->n_recovery < 0 || cfg->n_recovery > TB_RECOVERY_MAX)
			return whyf(why, "n_recovery %d is out of range",
				    cfg->n_recovery);
		for (int i = 0; i < cfg->n_recovery; i++) {
			snprintf(shown, sizeof(shown), "entry %d", i + 1);
			if (check_endpoint(&cfg->recovery[i], shown, why))
				return -1;
		}
		return 0;
	case K_MODE:
		v = load_int(k, field);
		snprintf(shown, sizeof(shown), "%04llo", (unsigned long long)v);
		return v == 0 ? 0 : check_mode(v, shown, why);
	case K_NAMES:
		if (cfg->n_sources < 0 || cfg->n_sources > TB_SOURCES_MAX)
			return whyf(why, "n_sources %d is out of range",
				    cfg->n_sources);
		for (int i = 0; i < cfg->n_sources; i++) {
			const char *nm = cfg->sources[i];

			if (!memchr(nm, '\0', TB_NAME_MAX) ||
			    !valid_stream_name(nm, strlen(nm)))
				return whyf(why, "entry %d is not a stream name",
					    i + 1);
		}
		return 0;
	}
	return whyf(why, "internal error: key kind %d", (int)k->kind);
}

static bool value_given(const struct key_spec *k, const tb_stream_cfg_t *cfg)
{
	const char *field = (const char *)cfg + k->off;

	switch (k->kind) {
	case K_ENDPOINT:
	case K_GROUP:
		return ((const tb_endpoint_t *)field)->host[0] != '\0';
	case K_TEXT:
	case K_PATH:
		return field[0] != '\0';
	case K_ENDPOINTS:
		return cfg->n_recovery > 0;
	case K_NAMES:
		return cfg->n_sources > 0;
	default:
		return !(k->flags & F_ZERO_UNSET) || load_int(k, field) != 0;
	}
}

/* ------------------------------------------------------- public: structs */

void tb_stream_cfg_init(tb_stream_cfg_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->ring_size = RING_DEFAULT;
	cfg->publisher_core = -1;
	cfg->subscriber_core = -1;
	cfg->idle = TB_IDLE_SPIN_YIELD;
	cfg->slow_consumer = TB_SLOW_LAP;
	cfg->heartbeat_ms = 100;
	cfg->liveness_timeout_ms = 1000;
	cfg->recovery_buffer = 4u << 20;
	cfg->recovery_timeout_ms = 5000;
	cfg->gid_index = -1;
	cfg->rdma_traffic_class = 106;
	cfg->rdma_timeout = 12;
	cfg->rdma_retry = 7;
	cfg->ttl = 1;
	cfg->loopback = 1;
	cfg->sources_wait_us = 1000;
}

const char *tb_config_transport_name(tb_transport_t t)
{
	return (unsigned)t < 4 ? transport_words[t] : "?";
}

int tb_stream_cfg_validate(const tb_stream_cfg_t *cfg)
{
	char why[WHY_MAX], allowed[WHY_MAX], shown[SHOWN_MAX];
	long ncpu = cpu_count();
	unsigned tbit;

	if (!cfg)
		return tb_error_set(TB_EINVAL, "tb_stream_cfg_validate: cfg is "
				  "NULL");
	if (!memchr(cfg->name, '\0', sizeof(cfg->name)) ||
	    !valid_stream_name(cfg->name, strlen(cfg->name)))
		return tb_error_set(TB_ECONFIG, "stream name '%s' is invalid; "
				  "allowed: 1 to %d of A-Z a-z 0-9 _ . -",
				  escape(shown, sizeof(shown), cfg->name,
					 strnlen(cfg->name, TB_NAME_MAX - 1)),
				  TB_NAME_MAX - 1);
	if (cfg->n_sources != 0) {
		tbit = T_SRC; /* no transport of its own: not checked */
	} else {
		if ((unsigned)cfg->transport >= 4)
			return tb_error_set(TB_ECONFIG, "stream '%s': field "
					  "'transport': %d is not a valid "
					  "transport; allowed: shm, rc, ud or "
					  "udp", cfg->name, (int)cfg->transport);
		tbit = 1u << cfg->transport;
	}
	for (int i = 0; i < N_KEYS; i++) {
		const struct key_spec *k = &keys[i];

		if (!value_given(k, cfg)) {
			if (!(k->required & tbit))
				continue;
			return tb_error_set(TB_ECONFIG, "stream '%s': missing "
					  "required field '%s'%s%s", cfg->name,
					  k->name,
					  (k->required & T_ALL) == T_ALL ? "" :
					  " for transport ",
					  (k->required & T_ALL) == T_ALL ? "" :
					  transport_words[cfg->transport]);
		}
		if (check_value(k, cfg, ncpu, why)) {
			describe(k, ncpu, allowed, sizeof(allowed));
			return tb_error_set(TB_ECONFIG, "stream '%s': field "
					  "'%s': %s; allowed: %s", cfg->name,
					  k->name, escape(shown, sizeof(shown),
							  why, strlen(why)),
					  allowed);
		}
	}
	if ((uint64_t)cfg->liveness_timeout_ms < 2 * (uint64_t)cfg->heartbeat_ms)
		return tb_error_set(TB_ECONFIG, "stream '%s': field "
				  "'liveness_timeout_ms': %u is less than twice "
				  "heartbeat_ms (%u); allowed: at least %llu",
				  cfg->name, cfg->liveness_timeout_ms,
				  cfg->heartbeat_ms,
				  2ULL * cfg->heartbeat_ms);
	if ((cfg->n_recovery > 0 || cfg->retention_endpoint.host[0]) &&
	    cfg->token[0] == '\0')
		return tb_error_set(TB_ECONFIG, "stream '%s': field 'token' is "
				  "missing; recovery and retention_endpoint "
				  "need it (the recovery protocol "
				  "authenticates every request)", cfg->name);
	if (cfg->retention_endpoint.host[0] && cfg->retention == 0)
		return tb_error_set(TB_ECONFIG, "stream '%s': field "
				  "'retention_endpoint' is set but retention "
				  "is 0; allowed: retention 1..100000000 with "
				  "it", cfg->name);
	if (cfg->transport == TB_TRANSPORT_SHM) {
		char path[TB_PATH_MAX];

		return tb_stream_cfg_shm_path(cfg, path, sizeof(path));
	}
	return 0;
}

int tb_stream_cfg_shm_path(const tb_stream_cfg_t *cfg, char *buf, size_t len)
{
	int n;

	if (cfg->shm_path[0])
		n = snprintf(buf, len, "%s", cfg->shm_path);
	else
		n = snprintf(buf, len, "%s%s", TB_SHM_PATH_PREFIX, cfg->name);
	if (n < 0 || (size_t)n >= len)
		return tb_error_set(TB_ECONFIG, "stream '%s': shm path is longer "
				  "than %zu characters", cfg->name, len - 1);
	return 0;
}

int tb_config_endpoint_parse(tb_endpoint_t *ep, const char *text)
{
	char why[WHY_MAX], allowed[WHY_MAX], shown[SHOWN_MAX];
	tb_endpoint_t tmp;

	if (!ep || !text)
		return tb_error_set(TB_EINVAL, "tb_config_endpoint_parse: NULL "
				  "argument");
	memset(&tmp, 0, sizeof(tmp));
	if (parse_endpoint(text, &tmp, why)) {
		describe(&keys[KEY_CONTROL], 0, allowed, sizeof(allowed));
		return tb_error_set(TB_ECONFIG, "%s; allowed: %s",
				  escape(shown, sizeof(shown), why, strlen(why)),
				  allowed);
	}
	*ep = tmp;
	return 0;
}

/* ---------------------------------------------------------- config files */

struct entry {
	tb_stream_cfg_t cfg;
	int line;               /* of the [stream NAME] header */
	uint64_t seen;          /* bit i: keys[i] was given */
	int key_line[N_KEYS];   /* where each given key was */
};

struct tb_config {
	char *path;
	int n, cap;
	struct entry *v;
};

struct loader {
	tb_config_t *cfg;
	const char *path;
	const char *text; /* the whole file */
	size_t len, off;  /* its length; where the next line starts */
	int lineno;     /* lines read so far = the line inih is handling */
	int cur;        /* index of the stream being read, -1 before one */
	int err;        /* first error (a TB_E* code), 0 while there is none */
	int err_line;   /* the line where it was found */
	long ncpu;
};

static int fail(struct loader *ld, int code)
{
	if (!ld->err) {
		ld->err = code;
		ld->err_line = ld->lineno;
	}
	return code;
}

static int key_fail(struct loader *ld, int line, const char *key,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int key_fail(struct loader *ld, int line, const char *key,
		    const char *fmt, ...)
{
	char what[WHY_MAX * 2], shown_key[SHOWN_MAX], shown_what[SHOWN_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	/* Both may quote the file (a key, a value): escaped. */
	tb_error_set(TB_ECONFIG, "%s:%d: key '%s': %s", ld->path, line,
		     escape(shown_key, sizeof(shown_key), key, strlen(key)),
		     escape(shown_what, sizeof(shown_what), what, strlen(what)));
	return fail(ld, TB_ECONFIG);
}

static int stream_fail(struct loader *ld, const struct entry *e,
		       const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int stream_fail(struct loader *ld, const struct entry *e,
		       const char *fmt, ...)
{
	char what[WHY_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	tb_error_set(TB_ECONFIG, "%s: stream '%s': %s", ld->path, e->cfg.name,
		   what);
	return fail(ld, TB_ECONFIG);
}

/* Edit distance, to suggest the key a typo meant. */
static int distance(const char *a, const char *b)
{
	int prev[33], row[33];
	size_t la = strlen(a), lb = strlen(b);

	if (la > 32 || lb > 32)
		return 99;
	for (size_t j = 0; j <= lb; j++)
		prev[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
			int del = prev[j] + 1, ins = row[j - 1] + 1;

			row[j] = sub < del ? (sub < ins ? sub : ins)
					   : (del < ins ? del : ins);
		}
		memcpy(prev, row, sizeof(row));
	}
	return prev[lb];
}

static int unknown_key(struct loader *ld, const char *name)
{
	const char *best = NULL;
	int best_d = 3; /* suggest only for a typo or two */
	char list[WHY_MAX * 2];

	for (int i = 0; i < N_KEYS; i++) {
		int d = distance(name, keys[i].name);

		if (d < best_d) {
			best_d = d;
			best = keys[i].name;
		}
	}
	if (best)
		return key_fail(ld, ld->lineno, name, "unknown key; did you "
				"mean '%s'?", best);
	list[0] = '\0';
	for (int i = 0; i < N_KEYS; i++) {
		size_t len = strlen(list);

		snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "",
			 keys[i].name);
	}
	return key_fail(ld, ld->lineno, name, "unknown key; known keys: %s",
			list);
}

/* Checks a stream once its section is complete: required keys, keys that do
 * not apply to its transport, and rules across keys; fills the default shm
 * path; then validates the struct as a whole. */
static int finish_stream(struct loader *ld, struct entry *e)
{
	char list[64], path[TB_PATH_MAX], what[32];
	tb_stream_cfg_t *c = &e->cfg;
	bool src = (e->seen & (1ull << KEY_SOURCES)) != 0;
	unsigned tbit;
	int rc;

	for (int i = KEY_ID; i <= KEY_TRANSPORT; i++)
		if (!(e->seen & (1ull << i)) && !(src && i == KEY_TRANSPORT))
			return stream_fail(ld, e, "missing required key '%s'",
					   keys[i].name);
	tbit = src ? T_SRC : 1u << c->transport;
	snprintf(what, sizeof(what), "%s%s", src ? "a stream of sources" :
		 "transport ", src ? "" : transport_words[c->transport]);
	for (int i = 0; i < N_KEYS; i++) {
		const struct key_spec *k = &keys[i];

		if ((k->required & tbit) && !(e->seen & (1ull << i)))
			return stream_fail(ld, e, "missing required key '%s' "
					   "(%s needs it)", k->name, what);
		if ((e->seen & (1ull << i)) && !(k->applies & tbit)) {
			fmt_transports(k->applies, list, sizeof(list));
			return key_fail(ld, e->key_line[i], k->name, "does not "
					"apply to %s; it is for %s", what, list);
		}
	}
	if ((uint64_t)c->liveness_timeout_ms < 2 * (uint64_t)c->heartbeat_ms) {
		if (e->seen & (1ull << KEY_LIVENESS_TIMEOUT_MS))
			return key_fail(ld, e->key_line[KEY_LIVENESS_TIMEOUT_MS],
					"liveness_timeout_ms", "%u is less than "
					"twice heartbeat_ms (%u); allowed: at "
					"least %llu and at most %lld",
					c->liveness_timeout_ms, c->heartbeat_ms,
					2ULL * c->heartbeat_ms,
					(long long)keys[KEY_LIVENESS_TIMEOUT_MS].hi);
		return key_fail(ld, e->key_line[KEY_HEARTBEAT_MS], "heartbeat_ms",
				"%u needs liveness_timeout_ms of at least %llu "
				"but it is %u (the default); set "
				"liveness_timeout_ms too", c->heartbeat_ms,
				2ULL * c->heartbeat_ms, c->liveness_timeout_ms);
	}
	if (c->transport == TB_TRANSPORT_SHM && c->shm_path[0] == '\0') {
		rc = tb_stream_cfg_shm_path(c, path, sizeof(path));
		if (rc)
			return tb_error_prepend(fail(ld, rc), "%s", ld->path);
		memcpy(c->shm_path, path, strlen(path) + 1);
	}
	/* The checks above and in the key handler cover every rule; this
	 * catches a rule added to validate and forgotten here. */
	rc = tb_stream_cfg_validate(c);
	if (rc)
		return tb_error_prepend(fail(ld, rc), "%s", ld->path);
	return 0;
}

/* Handles a "[...]" line (leading blanks already stripped).  Returns 0, or a
 * TB_E* code with the error recorded. */
static int section_header(struct loader *ld, const char *p)
{
	const char *close = strchr(p, ']'), *q, *word, *name;
	size_t word_len, name_len;
	char shown[SHOWN_MAX]; /* the header as the file has it, escaped */
	struct entry *e;

	/* the previous stream is complete: its errors come first */
	if (ld->cur >= 0 && finish_stream(ld, &ld->cfg->v[ld->cur]))
		return ld->err;
	escape(shown, sizeof(shown), p,
	       close ? (size_t)(close - p + 1) : strlen(p));
	if (!close) {
		tb_error_set(TB_ECONFIG, "%s:%d: section '%s': missing ']'",
			   ld->path, ld->lineno, shown);
		return fail(ld, TB_ECONFIG);
	}
	for (q = close + 1; isspace((unsigned char)*q); q++)
		;
	if (*q && *q != ';' && *q != '#') {
		tb_error_set(TB_ECONFIG, "%s:%d: section '%s': unexpected text "
			   "after ']'", ld->path, ld->lineno, shown);
		return fail(ld, TB_ECONFIG);
	}
	for (word = p + 1; isspace((unsigned char)*word); word++)
		;
	for (q = word; q < close && !isspace((unsigned char)*q); q++)
		;
	word_len = (size_t)(q - word);
	for (name = q; name < close && isspace((unsigned char)*name); name++)
		;
	for (q = name; q < close && !isspace((unsigned char)*q); q++)
		;
	name_len = (size_t)(q - name);
	while (q < close && isspace((unsigned char)*q))
		q++;
	if (word_len != 6 || strncmp(word, "stream", 6) != 0) {
		tb_error_set(TB_ECONFIG, "%s:%d: section '%s': unknown section; "
			   "only [stream NAME] sections are allowed", ld->path,
			   ld->lineno, shown);
		return fail(ld, TB_ECONFIG);
	}
	if (name_len == 0 || q != close) {
		tb_error_set(TB_ECONFIG, "%s:%d: section '%s': expected "
			   "[stream NAME] with exactly one name", ld->path,
			   ld->lineno, shown);
		return fail(ld, TB_ECONFIG);
	}
	if (!valid_stream_name(name, name_len)) {
		tb_error_set(TB_ECONFIG, "%s:%d: section '%s': invalid stream "
			   "name; allowed: 1 to %d of A-Z a-z 0-9 _ . -",
			   ld->path, ld->lineno, shown, TB_NAME_MAX - 1);
		return fail(ld, TB_ECONFIG);
	}
	for (int i = 0; i < ld->cfg->n; i++) {
		e = &ld->cfg->v[i];
		if (strlen(e->cfg.name) == name_len &&
		    memcmp(e->cfg.name, name, name_len) == 0) {
			tb_error_set(TB_ECONFIG, "%s:%d: section '%s': stream "
				   "'%s' is already defined at line %d",
				   ld->path, ld->lineno, shown,
				   e->cfg.name, e->line);
			return fail(ld, TB_ECONFIG);
		}
	}
	if (ld->cfg->n == ld->cfg->cap) {
		int cap = ld->cfg->cap ? 2 * ld->cfg->cap : 8;
		struct entry *v = realloc(ld->cfg->v, (size_t)cap * sizeof(*v));

		if (!v) {
			tb_error_set(TB_ENOMEM, "%s:%d: out of memory", ld->path,
				   ld->lineno);
			return fail(ld, TB_ENOMEM);
		}
		ld->cfg->v = v;
		ld->cfg->cap = cap;
	}
	ld->cur = ld->cfg->n++;
	e = &ld->cfg->v[ld->cur];
	memset(e, 0, sizeof(*e));
	tb_stream_cfg_init(&e->cfg);
	memcpy(e->cfg.name, name, name_len);
	e->cfg.name[name_len] = '\0';
	e->line = ld->lineno;
	return 0;
}

/* The ini_reader: one physical line per call (see the essay at the top). */
static char *next_line(char *str, int num, void *stream)
{
	struct loader *ld = stream;
	const char *line, *nl;
	size_t n;

	if (ld->err || ld->off == ld->len)
		return NULL; /* stop at the first error, or at the end */
	line = ld->text + ld->off;
	nl = memchr(line, '\n', ld->len - ld->off);
	n = nl ? (size_t)(nl - line) : ld->len - ld->off;
	ld->off += nl ? n + 1 : n;
	ld->lineno++;
	if (memchr(line, '\0', n)) {
		tb_error_set(TB_ECONFIG, "%s:%d: line contains a NUL byte; a "
			   "config file is text", ld->path, ld->lineno);
		fail(ld, TB_ECONFIG);
		return NULL;
	}
	while (n > 0 && line[n - 1] == '\r')
		n--;
	if (ld->lineno == 1 && n >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0)
		line += 3, n -= 3; /* UTF-8 byte order mark */
	while (n > 0 && isspace((unsigned char)*line))
		line++, n--;
	if (n + 1 > (size_t)num) {
		tb_error_set(TB_ECONFIG, "%s:%d: line is %zu characters long; "
			   "at most %d are allowed", ld->path, ld->lineno, n,
			   num - 1);
		fail(ld, TB_ECONFIG);
		return NULL;
	}
	memcpy(str, line, n);
	str[n] = '\0';
	if (*str == '[' && section_header(ld, str))
		return NULL;
	return str;
}

/* The ini_handler: one "key = value" of the current line. */
static int on_key(void *user, const char *section, const char *name,
		  const char *value)
{
	struct loader *ld = user;
	const struct key_spec *k;
	struct entry *e;
	char why[WHY_MAX], allowed[WHY_MAX];
	int i;

	(void)section; /* inih's copy is cut at 50 bytes; ld->cur is exact */
	if (ld->err)
		return 0;
	if (ld->cur < 0) {
		key_fail(ld, ld->lineno, name, "comes before any section; put "
			 "it under a [stream NAME] header");
		return 0;
	}
	e = &ld->cfg->v[ld->cur];
	k = key_by_name(name);
	if (!k) {
		unknown_key(ld, name);
		return 0;
	}
	i = (int)(k - keys);
	if (e->seen & (1ull << i)) {
		key_fail(ld, ld->lineno, name, "given twice in stream '%s' "
			 "(first at line %d)", e->cfg.name, e->key_line[i]);
		return 0;
	}
	describe(k, ld->ncpu, allowed, sizeof(allowed));
	if (value[0] == '\0') {
		key_fail(ld, ld->lineno, name, "no value; allowed: %s",
			 allowed);
		return 0;
	}
	if (parse_value(k, &e->cfg, value, ld->ncpu, why)) {
		key_fail(ld, ld->lineno, name, "%s; allowed: %s", why, allowed);
		return 0;
	}
	e->seen |= 1ull << i;
	e->key_line[i] = ld->lineno;
	return 1;
}

/* The stream of the file that lists `e` among its sources, or NULL. */
static const struct entry *listed_by(const tb_config_t *cfg,
				     const struct entry *e)
{
	for (int i = 0; i < cfg->n; i++)
		for (int k = 0; k < cfg->v[i].cfg.n_sources; k++)
			if (strcmp(cfg->v[i].cfg.sources[k], e->cfg.name) == 0)
				return &cfg->v[i];
	return NULL;
}

/* What needs the whole file: every source names an ordinary stream of it,
 * listed by one stream only, with that stream's id; and ids are unique
 * but for that (a source and the stream that lists it, or two sources of
 * one stream). */
static int finish_file(struct loader *ld)
{
	tb_config_t *cfg = ld->cfg;

	for (int i = 0; i < cfg->n; i++) {
		const struct entry *e = &cfg->v[i];

		for (int k = 0; k < e->cfg.n_sources; k++) {
			const char *nm = e->cfg.sources[k];
			const struct entry *s = NULL;

			for (int j = 0; j < cfg->n; j++)
				if (strcmp(cfg->v[j].cfg.name, nm) == 0)
					s = &cfg->v[j];
			if (!s)
				return key_fail(ld, e->key_line[KEY_SOURCES],
						"sources", "no stream '%s' in "
						"this file", nm);
			if (s->cfg.n_sources)
				return key_fail(ld, e->key_line[KEY_SOURCES],
						"sources", "'%s' has sources "
						"of its own; a source is an "
						"ordinary stream", nm);
			for (int j = 0; j < i; j++)
				for (int m = 0; m < cfg->v[j].cfg.n_sources; m++)
					if (!strcmp(cfg->v[j].cfg.sources[m], nm))
						return key_fail(ld,
							e->key_line[KEY_SOURCES],
							"sources", "'%s' is "
							"already a source of "
							"stream '%s' (line %d)",
							nm, cfg->v[j].cfg.name,
							cfg->v[j].key_line[KEY_SOURCES]);
			if (s->cfg.id != e->cfg.id)
				return key_fail(ld, s->key_line[KEY_ID], "id",
						"%u is not the id of stream '%s' "
						"(line %d), which lists '%s' "
						"among its sources; the copies "
						"of a stream carry its id",
						s->cfg.id, e->cfg.name,
						e->key_line[KEY_ID], nm);
		}
	}
	for (int i = 1; i < cfg->n; i++) {
		const struct entry *e = &cfg->v[i];
		const struct entry *le = listed_by(cfg, e);

		for (int j = 0; j < i; j++) {
			const struct entry *o = &cfg->v[j];
			const struct entry *lo = listed_by(cfg, o);

			if (o->cfg.id != e->cfg.id || le == o || lo == e ||
			    (le && le == lo))
				continue;
			return key_fail(ld, e->key_line[KEY_ID], "id", "%u is "
					"already the id of stream '%s' (line "
					"%d); ids must be unique", e->cfg.id,
					o->cfg.name, o->key_line[KEY_ID]);
		}
	}
	return 0;
}

int tb_config_load_buffer(tb_config_t **out, const char *name,
			  const void *text, size_t len)
{
	struct loader ld;
	int r, rc = 0;

	if (!out || !name || (!text && len))
		return tb_error_set(TB_EINVAL, "tb_config_load_buffer: NULL "
				  "argument");
	*out = NULL;
	if (len > TB_CONFIG_FILE_MAX)
		return tb_error_set(TB_ECONFIG, "%s: %zu bytes, more than the "
				  "%u (1 MiB) a config file may hold", name,
				  len, TB_CONFIG_FILE_MAX);
	memset(&ld, 0, sizeof(ld));
	ld.path = name;
	ld.text = text;
	ld.len = len;
	ld.cur = -1;
	ld.ncpu = cpu_count();
	ld.cfg = calloc(1, sizeof(*ld.cfg));
	if (ld.cfg)
		ld.cfg->path = strdup(name);
	if (!ld.cfg || !ld.cfg->path) {
		rc = tb_error_set(TB_ENOMEM, "%s: out of memory", name);
		goto out;
	}

	r = ini_parse_stream(next_line, &ld, on_key, &ld);
	if (r > 0 && (!ld.err || r < ld.err_line)) {
		/* a line inih could not split, before any error of ours */
		rc = tb_error_set(TB_ECONFIG, "%s:%d: expected 'key = value', "
				"'[stream NAME]' or a comment", name, r);
	} else if (ld.err) {
		rc = ld.err;
	} else if (r == -2) {
		rc = tb_error_set(TB_ENOMEM, "%s: out of memory", name);
	} else if (r != 0) {
		rc = tb_error_set(TB_EIO, "%s: inih failed (%d)", name, r);
	} else if (ld.cur >= 0) {
		rc = finish_stream(&ld, &ld.cfg->v[ld.cur]);
		if (rc == 0)
			rc = finish_file(&ld);
	} else {
		rc = tb_error_set(TB_ECONFIG, "%s: no [stream NAME] section; a "
				"config file describes at least one stream",
				name);
	}
out:
	if (rc) {
		tb_config_free(ld.cfg);
		return rc;
	}
	*out = ld.cfg;
	return 0;
}

/* What a file that is not a regular one is, for the message. */
static const char *file_kind(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISSOCK(mode))
		return "a socket";
	return "not a regular file";
}

/*
 * Reads the config file at `path` whole into a malloc'd *text (*len bytes).
 * Opened without blocking (a FIFO without a writer would hang open(2)) and
 * checked with fstat before a byte is read: only a regular file of at most
 * TB_CONFIG_FILE_MAX bytes is read, so /dev/zero, a FIFO or a huge file
 * fails at once instead of filling memory.  The size is checked again
 * while reading, for a file that grows.
 */
static int read_file(const char *path, char **text, size_t *len)
{
	struct stat st;
	size_t cap, n = 0;
	char *buf;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return tb_error_sys(errno, "%s: cannot open config file", path);
	if (fstat(fd, &st) != 0) {
		rc = tb_error_sys(errno, "%s: cannot stat config file", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = tb_error_set(TB_ECONFIG, "%s: is %s; a config file must be "
				"a regular file", path, file_kind(st.st_mode));
		goto out;
	}
	if (st.st_size > (off_t)TB_CONFIG_FILE_MAX) {
		rc = tb_error_set(TB_ECONFIG, "%s: %lld bytes, more than the %u "
				"(1 MiB) a config file may hold", path,
				(long long)st.st_size, TB_CONFIG_FILE_MAX);
		goto out;
	}
	/* One byte more than the limit, to see a file that grew past it. */
	cap = (size_t)st.st_size + 1;
	buf = malloc(cap);
	if (!buf) {
		rc = tb_error_set(TB_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	for (;;) {
		ssize_t got;

		if (n == cap) {
			char *more;

			if (cap > TB_CONFIG_FILE_MAX) {
				rc = tb_error_set(TB_ECONFIG, "%s: more than the "
						"%u bytes (1 MiB) a config file "
						"may hold", path,
						TB_CONFIG_FILE_MAX);
				break;
			}
			cap = cap * 2 > TB_CONFIG_FILE_MAX + 1 ?
			      TB_CONFIG_FILE_MAX + 1 : cap * 2;
			more = realloc(buf, cap);
			if (!more) {
				rc = tb_error_set(TB_ENOMEM, "%s: out of memory",
						path);
				break;
			}
			buf = more;
		}
		got = read(fd, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = tb_error_sys(errno, "%s: cannot read config file",
					path);
			break;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	if (rc) {
		free(buf);
		goto out;
	}
	*text = buf;
	*len = n;
out:
	close(fd);
	return rc;
}

int tb_config_load(tb_config_t **out, const char *path)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	if (!out || !path)
		return tb_error_set(TB_EINVAL, "tb_config_load: NULL argument");
	*out = NULL;
	rc = read_file(path, &text, &len);
	if (rc)
		return rc;
	rc = tb_config_load_buffer(out, path, text, len);
	free(text);
	return rc;
}

void tb_config_free(tb_config_t *cfg)
{
	if (!cfg)
		return;
	free(cfg->v);
	free(cfg->path);
	free(cfg);
}

int tb_config_stream_count(const tb_config_t *cfg)
{
	return cfg ? cfg->n : 0;
}

const tb_stream_cfg_t *tb_config_stream_at(const tb_config_t *cfg, int i)
{
	if (!cfg || i < 0 || i >= cfg->n) {
		tb_error_set(TB_EINVAL, "tb_config_stream_at: index %d is out of "
			   "range (%d streams)", i, cfg ? cfg->n : 0);
		return NULL;
	}
	return &cfg->v[i].cfg;
}

const tb_stream_cfg_t *tb_config_stream(const tb_config_t *cfg,
					const char *name)
{
	char names[WHY_MAX];

	if (!cfg || !name) {
		tb_error_set(TB_EINVAL, "tb_config_stream: NULL argument");
		return NULL;
	}
	names[0] = '\0';
	for (int i = 0; i < cfg->n; i++) {
		size_t len = strlen(names);

		if (strcmp(cfg->v[i].cfg.name, name) == 0)
			return &cfg->v[i].cfg;
		snprintf(names + len, sizeof(names) - len, "%s%s",
			 i ? ", " : "", cfg->v[i].cfg.name);
	}
	tb_error_set(TB_ENOENT, "%s: no stream '%s'; the file has: %s", cfg->path,
		   name, names);
	return NULL;
}

int tb_config_load_stream(tb_stream_cfg_t *out, const char *path,
			  const char *stream)
{
	const tb_stream_cfg_t *cfg;
	tb_config_t *file;
	int rc;

	rc = tb_config_load(&file, path);
	if (rc < 0)
		return rc;
	cfg = tb_config_stream(file, stream);
	if (cfg)
		*out = *cfg;
	tb_config_free(file);
	return cfg ? 0 : TB_ENOENT;
}
