# softrdma: tickbus's software RDMA device (see tools/softrdma/README).
# GNU make fragment, -include'd by the top-level Makefile, which defines
# BUILD, CC and CFLAGS and collects ALL_TARGETS and TEST_BINS.
#
#   $(BUILD)/softrdma/libibverbs.so.1    drop-in for rdma-core's library
#   $(BUILD)/softrdma/softrdma-ctl        port down/up, GID changes (ctl.c)
#   $(BUILD)/tests/test_softrdma_*        cmocka tests, the tools and perftest tests
#
# The library is built with CFLAGS minus any -fsanitize flag: it is loaded
# into arbitrary binaries (rdma-core's tools, uninstrumented programs), which
# a sanitizer runtime cannot follow.  Tests are built with the full CFLAGS.
# Tests carry an RPATH to $(BUILD)/softrdma, so they load softrdma even when
# run by hand; the runner also sets LD_LIBRARY_PATH and SOFTRDMA_FABRIC.

BUILD ?= build
CC ?= cc
CFLAGS ?= -std=gnu11 -Wall -Wextra -Werror -O2 -g

SOFTRDMA_DIR := tools/softrdma
SOFTRDMA_OUT = $(BUILD)/softrdma
SOFTRDMA_LIB = $(SOFTRDMA_OUT)/libibverbs.so.1
SOFTRDMA_MAP := $(SOFTRDMA_DIR)/libibverbs.map
SOFTRDMA_SRCS := $(wildcard $(SOFTRDMA_DIR)/*.c)
SOFTRDMA_OBJS = $(patsubst $(SOFTRDMA_DIR)/%.c,$(SOFTRDMA_OUT)/obj/%.o,$(SOFTRDMA_SRCS))
SOFTRDMA_CFLAGS = $(filter-out -fsanitize%,$(CFLAGS)) -fPIC -fvisibility=hidden
SOFTRDMA_LDFLAGS = -shared -Wl,-soname,libibverbs.so.1 \
	-Wl,--version-script=$(SOFTRDMA_MAP) -Wl,-z,defs

SOFTRDMA_CTL = $(SOFTRDMA_OUT)/softrdma-ctl
SOFTRDMA_TEST_NAMES := device qp datapath ud async path events limits mw read qpex
SOFTRDMA_TESTS = $(patsubst %,$(BUILD)/tests/test_softrdma_%,$(SOFTRDMA_TEST_NAMES)) \
	$(BUILD)/tests/test_softrdma_tools $(BUILD)/tests/test_softrdma_perftest
SOFTRDMA_TEST_LIBS = -L$(SOFTRDMA_OUT) -l:libibverbs.so.1 -lcmocka -lpthread \
	-Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN/../softrdma'

ALL_TARGETS += $(SOFTRDMA_LIB) $(SOFTRDMA_CTL)
TEST_BINS += $(SOFTRDMA_TESTS)

$(SOFTRDMA_OUT)/obj/%.o: $(SOFTRDMA_DIR)/%.c $(SOFTRDMA_DIR)/softrdma.h
	@mkdir -p $(dir $@)
	$(CC) $(SOFTRDMA_CFLAGS) -c $< -o $@

$(SOFTRDMA_LIB): $(SOFTRDMA_OBJS) $(SOFTRDMA_MAP)
	@mkdir -p $(dir $@)
	$(CC) $(SOFTRDMA_CFLAGS) $(SOFTRDMA_LDFLAGS) -o $@ $(SOFTRDMA_OBJS) -lpthread

$(SOFTRDMA_CTL): $(SOFTRDMA_DIR)/ctl/softrdma-ctl.c $(SOFTRDMA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(SOFTRDMA_CFLAGS) -o $@ $< -L$(SOFTRDMA_OUT) -l:libibverbs.so.1 \
		-Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN'

$(BUILD)/tests/test_softrdma_%: $(SOFTRDMA_DIR)/tests/test_softrdma_%.c \
		$(SOFTRDMA_DIR)/tests/sr_test.h $(SOFTRDMA_LIB) $(SOFTRDMA_CTL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(SOFTRDMA_DIR)/tests -o $@ $< $(LDFLAGS) $(SOFTRDMA_TEST_LIBS)

$(BUILD)/tests/test_softrdma_tools: $(SOFTRDMA_DIR)/tests/test_softrdma_tools.sh $(SOFTRDMA_LIB)
	@mkdir -p $(dir $@)
	cp $< $@
	chmod +x $@

$(BUILD)/tests/test_softrdma_perftest: $(SOFTRDMA_DIR)/tests/test_softrdma_perftest.sh $(SOFTRDMA_LIB)
	@mkdir -p $(dir $@)
	cp $< $@
	chmod +x $@

.PHONY: softrdma softrdma-test
softrdma: $(SOFTRDMA_LIB)

# Runs the softrdma tests alone, each on its own fabric; 77 is a skip.
softrdma-test: $(SOFTRDMA_TESTS)
	@fail=0; for t in $(SOFTRDMA_TESTS); do \
		LD_LIBRARY_PATH=$(SOFTRDMA_OUT) SOFTRDMA_FABRIC=sr-$$$$-$$(basename $$t) $$t; \
		rc=$$?; \
		if [ $$rc -eq 77 ]; then echo "SKIP $$t"; \
		elif [ $$rc -ne 0 ]; then echo "FAIL $$t ($$rc)"; fail=1; \
		else echo "PASS $$t"; fi; \
	done; exit $$fail
