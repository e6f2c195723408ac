# schema.mk - the market-data schema: builds the generator and the headers it
# writes.  GNU make fragment, -include'd by the top-level Makefile, which
# defines BUILD, CC, CFLAGS, LDFLAGS and the source lists and collects
# ALL_TARGETS.
#
#   $(BUILD)/bin/tb-schemagen         the generator (a host tool, libxml2)
#   $(BUILD)/gen/tickbus_schema.h     schema/tickbus.xml, prefix tb_md
#   $(BUILD)/gen/tickbus_schema_v1.h  the same schema as a version-1 peer
#                                     sees it (prefix tb_v1): the evolution
#                                     tests read v2 messages with it
#   $(BUILD)/gen/tbf_schema*.h        tests/schema/features.xml, the
#                                     generator's other paths, for the tests
#
# Every object of the tree is ordered after the headers (order-only), so a
# first build generates them before anything includes them; the compiler's
# .d files then rebuild whatever includes them when the schema changes.

SCHEMAGEN := $(BUILD)/bin/tb-schemagen
SCHEMA_XML := schema/tickbus.xml
SCHEMA_HEADERS := $(BUILD)/gen/tickbus_schema.h $(BUILD)/gen/tickbus_schema_v1.h
SCHEMAGEN_XML_CFLAGS := $(shell pkg-config --cflags libxml-2.0 2>/dev/null)
SCHEMAGEN_XML_LIBS := $(shell pkg-config --libs libxml-2.0 2>/dev/null)

ALL_TARGETS += $(SCHEMAGEN) $(SCHEMA_HEADERS)

$(SCHEMAGEN): schema/tb-schemagen.c
	@mkdir -p $(dir $@)
	@echo "  HOSTCC  $@"
	$(Q)$(CC) $(CFLAGS) $(SCHEMAGEN_XML_CFLAGS) -o $@ $< $(LDFLAGS) \
		$(SCHEMAGEN_XML_LIBS)

$(BUILD)/gen/tickbus_schema.h: $(SCHEMA_XML) $(SCHEMAGEN)
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q)$(SCHEMAGEN) -o $@ $<

$(BUILD)/gen/tickbus_schema_v1.h: $(SCHEMA_XML) $(SCHEMAGEN)
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q)$(SCHEMAGEN) --version 1 --prefix tb_v1 -o $@ $<

# A schema that exercises the generator's other paths, for test_schema.
SCHEMA_HEADERS += $(BUILD)/gen/tbf_schema.h $(BUILD)/gen/tbf_schema_v1.h
ALL_TARGETS += $(BUILD)/gen/tbf_schema.h $(BUILD)/gen/tbf_schema_v1.h

$(BUILD)/gen/tbf_schema.h: tests/schema/features.xml $(SCHEMAGEN)
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q)$(SCHEMAGEN) -o $@ $<

$(BUILD)/gen/tbf_schema_v1.h: tests/schema/features.xml $(SCHEMAGEN)
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q)$(SCHEMAGEN) --version 1 --prefix tbf1 -o $@ $<

# Last: a rule's prerequisites are expanded where it is read.
SCHEMA_USERS := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS) $(MD_SRCS) $(PROG_SRCS) \
	$(TEST_SRCS) $(BENCH_SRCS) $(EXAMPLE_SRCS))
$(SCHEMA_USERS): | $(SCHEMA_HEADERS)
