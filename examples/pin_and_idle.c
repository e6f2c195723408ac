/* tb_thread_pin, tb_idle_init / tb_idle_step and tb_clock_now_ns: the
 * furniture of a hot thread. */
#include <tickbus/tickbus.h>

#include <stdio.h>

int main(void)
{
	tb_idle_t idle;
	uint64_t t0, t1;
	int i;

	/* Pinning warns (once) when the core is not in isolcpus. */
	if (tb_thread_pin(0) < 0)
		fprintf(stderr, "pin: %s\n", tb_errmsg());

	tb_idle_init(&idle, TB_IDLE_BACKOFF);
	t0 = tb_clock_now_ns();
	for (i = 0; i < 1000; i++)
		tb_idle_step(&idle, 0); /* nothing to do: spin, yield, then sleep */
	t1 = tb_clock_now_ns();
	printf("1000 idle steps took %.3f ms\n", (t1 - t0) / 1e6);
	return t1 > t0 ? 0 : 1;
}
