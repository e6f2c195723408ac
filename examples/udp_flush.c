/* tb_pub_flush: a UDP multicast stream that batches a burst of messages
 * into as few datagrams as fit, sent when the burst ends.
 * Build: cc udp_flush.c $(pkg-config --cflags --libs tickbus) */
#include <tickbus/tickbus.h>

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

static void on_message(void *clientd, const tb_msg_t *m)
{
	(*(int *)clientd)++;
	printf("seq %llu: %.*s\n", (unsigned long long)m->seq, (int)m->len,
	       (const char *)m->data);
}

int main(void)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	char text[32];
	int got = 0, polls = 0;

	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "example-udp");
	cfg.id = 1;
	cfg.transport = TB_TRANSPORT_UDP;
	/* A group and port of this process's own, on this host only. */
	snprintf(cfg.group.host, sizeof(cfg.group.host), "239.196.%d.%d",
		 (int)(getpid() >> 8) & 0xff, (int)(getpid() & 0xff) | 1);
	cfg.group.port = (uint16_t)(20000 + getpid() % 12000);
	snprintf(cfg.interface, sizeof(cfg.interface), "127.0.0.1");
	cfg.batch_us = 100; /* a datagram waits at most 100 us for company */

	/* The subscriber first: it joins the group before anything is sent. */
	if (tb_subscriber_open(&sub, &cfg) < 0 || tb_publisher_open(&pub, &cfg) < 0) {
		fprintf(stderr, "open: %s\n", tb_errmsg());
		return 1;
	}
	for (int i = 1; i <= 10; i++) {
		int len = snprintf(text, sizeof(text), "quote %d", i);

		if (tb_pub_offer(pub, 1, text, (uint32_t)len) < 0)
			return 1;
	}
	/* The burst is over: send what is held (one datagram, ten frames). */
	if (tb_pub_flush(pub) < 0)
		return 1;
	while (got < 10 && polls++ < 1000000) {
		int n = tb_sub_poll(sub, on_message, &got, 16);

		if (n < 0 && n != TB_NOT_CONNECTED) {
			fprintf(stderr, "poll: %s\n", tb_strerror(n));
			return 1;
		}
		if (n <= 0)
			sched_yield();
	}
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
	return got == 10 ? 0 : 1;
}
