/* tb_pub_claim / tb_pub_commit / tb_pub_abort: publish in place, zero copy. */
#include <tickbus/tickbus.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct quote {
	uint32_t instrument;
	int64_t bid, ask; /* price mantissas, exponent -4 */
};

static void on_quote(void *clientd, const tb_msg_t *m)
{
	struct quote q;

	(void)clientd;
	memcpy(&q, m->data, sizeof(q));
	printf("seq %llu: instrument %u bid %lld ask %lld\n",
	       (unsigned long long)m->seq, q.instrument, (long long)q.bid,
	       (long long)q.ask);
}

int main(void)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	tb_claim_t claim;
	struct quote *q;

	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "example");
	cfg.id = 1;
	cfg.transport = TB_TRANSPORT_SHM;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-example-claim.%d",
		 (int)getpid());
	if (tb_publisher_open(&pub, &cfg) < 0 || tb_subscriber_open(&sub, &cfg) < 0) {
		fprintf(stderr, "open: %s\n", tb_errmsg());
		return 1;
	}

	/* Write the quote straight into the ring, then publish it. */
	if (tb_pub_claim(pub, 1, sizeof(*q), &claim) < 0)
		return 1;
	q = claim.data;
	q->instrument = 42;
	q->bid = 1012500;
	q->ask = 1012600;
	tb_pub_commit(pub, &claim);

	/* A claim that is given back consumes no sequence number. */
	if (tb_pub_claim(pub, 1, sizeof(*q), &claim) < 0)
		return 1;
	tb_pub_abort(pub, &claim);

	int n = tb_sub_poll(sub, on_quote, NULL, 10);
	uint64_t next = tb_pub_next_seq(pub);

	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(cfg.shm_path);
	return n == 1 && next == 2 ? 0 : 1;
}
