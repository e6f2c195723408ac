/* tb_sub_poll in a strategy's loop, with an idle strategy and every result
 * handled: messages, loss (with its range), restart, close, a dead
 * publisher. */
#include <tickbus/tickbus.h>

#include <stdio.h>
#include <unistd.h>

static void on_message(void *clientd, const tb_msg_t *m)
{
	(*(uint64_t *)clientd)++;
	(void)m;
}

int main(void)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	uint64_t got = 0, first, last;
	tb_idle_t idle;
	int i, done = 0;

	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "example");
	cfg.id = 1;
	cfg.transport = TB_TRANSPORT_SHM;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-example-poll.%d",
		 (int)getpid());
	if (tb_subscriber_open(&sub, &cfg) < 0 || tb_publisher_open(&pub, &cfg) < 0) {
		fprintf(stderr, "open: %s\n", tb_errmsg());
		return 1;
	}
	for (i = 0; i < 1000; i++)
		tb_pub_offer(pub, 1, &i, sizeof(i));
	tb_publisher_close(pub); /* the subscriber drains, then sees TB_CLOSED */

	tb_idle_init(&idle, cfg.idle);
	while (!done) {
		int n = tb_sub_poll(sub, on_message, &got, 256);

		switch (n) {
		case TB_LAPPED:
		case TB_GAP:
			tb_sub_loss(sub, &first, &last);
			printf("lost %llu..%llu\n", (unsigned long long)first,
			       (unsigned long long)last);
			break;
		case TB_NEW_EPOCH:
			printf("publisher restarted: sequence starts at 1\n");
			break;
		case TB_CLOSED:
		case TB_PUBLISHER_DEAD:
			printf("%s after %llu messages\n", tb_strerror(n),
			       (unsigned long long)got);
			done = 1;
			break;
		default:
			break;
		}
		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	tb_subscriber_close(sub);
	unlink(cfg.shm_path);
	return got == 1000 ? 0 : 1;
}
