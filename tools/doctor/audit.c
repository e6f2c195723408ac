/*
 * audit.c - tb-doctor --audit: every memory region the running tickbus
 * processes registered with the NIC (their counters files record each one:
 * bus/counters.h, tb_counters_mr_add), judged against what its use needs.
 *
 * An RDMA key is a capability: whoever holds an rkey may read or write the
 * region within the access flags it was registered with, until it is
 * deregistered.  So a registration is flagged when it grants more than its
 * use needs:
 *   ring_tx  (a publisher's frame ring)   no remote access at all
 *   ring_rx  (an rc subscriber's ring)    REMOTE_WRITE, one peer
 *   credit   (a publisher's credit slot)  REMOTE_WRITE, one peer
 *   send, recv (datagram buffers)         no remote access
 *   replay   (history read by recovery)   REMOTE_READ
 * and in every case: REMOTE_ATOMIC and MW_BIND are never needed, and a
 * remote key handed to more than one peer lets one subscriber write into
 * what another reads.
 */
#include "tools/doctor/doctor.h"

#include "bus/counters.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REMOTE (TB_MR_REMOTE_WRITE | TB_MR_REMOTE_READ | TB_MR_REMOTE_ATOMIC)

/* The remote access `use` needs; ~0u for an unknown use. */
static uint32_t needs(uint32_t use)
{
	switch (use) {
	case TB_MR_RING_TX: case TB_MR_SEND: case TB_MR_RECV: return 0;
	case TB_MR_RING_RX: case TB_MR_CREDIT: return TB_MR_REMOTE_WRITE;
	case TB_MR_REPLAY: return TB_MR_REMOTE_READ;
	default: return ~0u;
	}
}

/* Why `m` is broader than its use needs, into `why`; 0 if it is not. */
static int judge(const tb_counters_mr_t *m, char *why, size_t len)
{
	uint32_t need = needs(m->use), extra;
	size_t used = 0;

	why[0] = '\0';
#define WHY(...)                                                           \
	do {                                                               \
		used += (size_t)snprintf(why + used,                       \
					 used < len ? len - used : 0,      \
					 "%s", used ? "; " : "");          \
		used += (size_t)snprintf(why + used,                       \
					 used < len ? len - used : 0,      \
					 __VA_ARGS__);                     \
	} while (0)
	if (need == ~0u) {
		WHY("unknown use %u: cannot say what it needs", m->use);
		return 1;
	}
	extra = m->access & REMOTE & ~need;
	if (extra & TB_MR_REMOTE_WRITE)
		WHY("REMOTE_WRITE on a %s (%s): no peer writes it",
		    tb_mr_use_name((int)m->use),
		    tb_counter_role_name((int)m->role));
	if (extra & TB_MR_REMOTE_READ)
		WHY("REMOTE_READ, but no recovery reads a %s",
		    tb_mr_use_name((int)m->use));
	if (extra & TB_MR_REMOTE_ATOMIC)
		WHY("REMOTE_ATOMIC: tickbus never uses atomics");
	if (m->access & TB_MR_MW_BIND)
		WHY("MW_BIND: tickbus never binds memory windows");
	if ((m->access & REMOTE) && m->n_peers > 1)
		WHY("its key was handed to %u peers: each must have its own "
		    "region", m->n_peers);
#undef WHY
	return used > 0;
}

typedef struct audit {
	int json, n, flagged, first;
} audit_t;

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static int on_proc(void *arg, const tb_counters_proc_t *p)
{
	audit_t *a = arg;

	for (int i = 0; i < p->n_mrs; i++) {
		const tb_counters_mr_t *m = &p->mrs[i];
		char why[512], acc[96];
		int bad = judge(m, why, sizeof(why));

		a->n++;
		a->flagged += bad;
		tb_mr_access_str(m->access, acc, sizeof(acc));
		if (a->json) {
			printf("%s{\"pid\":%d,\"process\":", a->first ? "" : ",",
			       (int)p->pid);
			json_str(p->name);
			printf(",\"stream_id\":%u,\"role\":\"%s\",\"use\":\"%s\","
			       "\"transport\":", m->stream_id,
			       tb_counter_role_name((int)m->role),
			       tb_mr_use_name((int)m->use));
			json_str(m->transport);
			printf(",\"addr\":\"0x%" PRIx64 "\",\"length\":%" PRIu64
			       ",\"access\":\"%s\",\"rkey\":\"0x%x\",\"peers\":%u,"
			       "\"last_peer\":", m->addr, m->length, acc, m->rkey,
			       m->n_peers);
			json_str(m->peer);
			printf(",\"verdict\":\"%s\",\"why\":", bad ? "flag"
								   : "ok");
			json_str(why);
			putchar('}');
			a->first = 0;
		} else {
			printf("%-7d %-14.14s %5u %-10s %-7s %-4s 0x%012" PRIx64
			       " %10" PRIu64 " %-24s %5u %s\n", (int)p->pid,
			       p->name, m->stream_id,
			       tb_counter_role_name((int)m->role),
			       tb_mr_use_name((int)m->use), m->transport,
			       m->addr, m->length, acc, m->n_peers,
			       bad ? "FLAG" : "ok");
			if (m->peer[0])
				printf("        last peer given the key: %s\n",
				       m->peer);
			if (bad)
				printf("        %s\n", why);
		}
	}
	return 0;
}

int tb_doctor_audit(const char *dir, int json)
{
	audit_t a = {.json = json, .first = 1};
	int procs;

	if (json)
		printf("{\"registrations\":[");
	else
		printf("%-7s %-14s %5s %-10s %-7s %-4s %-14s %10s %-24s %5s %s\n",
		       "PID", "PROCESS", "ID", "ROLE", "USE", "TRNS", "ADDR",
		       "BYTES", "ACCESS", "PEERS", "VERDICT");
	procs = tb_counters_read_dir(dir, 0, on_proc, &a);
	if (procs < 0) {
		if (json)
			printf("]}\n");
		return -1;
	}
	if (json)
		printf("],\"processes\":%d,\"flagged\":%d}\n", procs, a.flagged);
	else
		printf("audit: %d registrations in %d processes, %d flagged\n",
		       a.n, procs, a.flagged);
	return a.flagged ? 1 : 0;
}
