# tb-stat's parts beyond tools/tb-stat.c: the Prometheus exposition and the
# /metrics server (-include'd by the top-level Makefile).
TB_STAT_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/stat/*.c))
$(BUILD)/bin/tb-stat: $(TB_STAT_OBJS)
TB_STAT_TEST_OBJS := $(filter-out %/tb-stat.o,$(TB_STAT_OBJS))
$(BUILD)/tests/test_tools_metrics: $(TB_STAT_OBJS)
