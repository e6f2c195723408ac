/*
 * tb-schemagen - turns an SBE-style XML message schema (schema/tickbus.xml)
 * into one C header: per message a packed struct whose size and field
 * offsets are checked with _Static_assert, encode and decode functions that
 * honour the block length, bounds-checked group iteration, and text and
 * JSON printers for tools.  A host tool: it runs at build time only.
 *
 * What it reads (a subset of SBE, enough for market data):
 *   <messageSchema package id version>  root; package is the default prefix
 *   <types>: <type name primitiveType [length] [presence] [nullValue]>,
 *            <composite name> of <type> (presence="constant" members take no
 *            room: a Price is an int64 mantissa with a constant exponent),
 *            <enum name encodingType> of <validValue name>N</validValue>
 *   <message name id [blockLength] [sinceVersion]> of <field name id type
 *            [offset] [sinceVersion]> then <group name id [dimensionType]
 *            [blockLength] [sinceVersion]> of <field>s.
 * Not supported (a clear error, not silence): <set>, <data>, <ref>, nested
 * groups, non-char arrays, bigEndian.
 *
 * Evolution rules it enforces: sinceVersion never decreases along a block
 * (new fields go at the end), and no field is newer than the schema.  With
 * --version N it writes the header a version-N peer would have: only the
 * fields, groups and messages with sinceVersion <= N, and blocks that end
 * after the last of them.
 *
 * Every schema error prints "tb-schemagen: FILE:LINE: what" and exits 1;
 * the output file is written to a temporary name and renamed at the end,
 * so a failed run never leaves a header behind.
 */
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_ITEMS 256  /* types, messages, fields per block, values per enum */
#define NAME_MAX_LEN 64

/* ------------------------------------------------------------ primitives */

enum prim { P_CHAR, P_INT8, P_UINT8, P_INT16, P_UINT16, P_INT32, P_UINT32,
	    P_INT64, P_UINT64, P_COUNT };

static const struct prim_info {
	const char *xml, *ctype, *null_macro, *min_macro, *max_macro;
	int size, is_signed;
	long long min;
	unsigned long long max;
} prims[P_COUNT] = {
	{"char", "char", "0", "0", "127", 1, 0, 0, 127},
	{"int8", "int8_t", "INT8_MIN", "INT8_MIN", "INT8_MAX", 1, 1, INT8_MIN, INT8_MAX},
	{"uint8", "uint8_t", "UINT8_MAX", "0", "UINT8_MAX", 1, 0, 0, UINT8_MAX},
	{"int16", "int16_t", "INT16_MIN", "INT16_MIN", "INT16_MAX", 2, 1, INT16_MIN, INT16_MAX},
	{"uint16", "uint16_t", "UINT16_MAX", "0", "UINT16_MAX", 2, 0, 0, UINT16_MAX},
	{"int32", "int32_t", "INT32_MIN", "INT32_MIN", "INT32_MAX", 4, 1, INT32_MIN, INT32_MAX},
	{"uint32", "uint32_t", "UINT32_MAX", "0", "UINT32_MAX", 4, 0, 0, UINT32_MAX},
	{"int64", "int64_t", "INT64_MIN", "INT64_MIN", "INT64_MAX", 8, 1, INT64_MIN, INT64_MAX},
	{"uint64", "uint64_t", "UINT64_MAX", "0", "UINT64_MAX", 8, 0, 0, UINT64_MAX},
};

/* ----------------------------------------------------------------- model */

enum kind { K_PRIM, K_ENUM, K_COMPOSITE };

struct value {        /* an enum's validValue */
	char name[NAME_MAX_LEN];
	long long v;
};

struct member {       /* a composite's <type> */
	char name[NAME_MAX_LEN];
	int prim, constant, offset;
	long long cval;
	char null_lit[48];
};

struct type {
	char name[NAME_MAX_LEN];
	int line, kind, builtin;
	int prim, length;      /* K_PRIM (and K_ENUM: prim is the encoding) */
	char null_lit[48];     /* C expression of the null value */
	struct value vals[MAX_ITEMS];
	int nvals;
	struct member m[16];   /* K_COMPOSITE */
	int nm;
	int is_decimal;        /* mantissa + constant exponent */
	long long exponent;
	int size;
};

struct field {
	char name[NAME_MAX_LEN];
	int id, line, offset, since;
	struct type *t;
};

struct block {
	char name[NAME_MAX_LEN];
	int id, line, since, length;
	struct field f[MAX_ITEMS];
	int nf;
	struct block *groups[16];  /* messages only */
	int ng;
};

static struct type *types[MAX_ITEMS];
static int ntypes;
static struct block *msgs[MAX_ITEMS];
static int nmsgs;
static const char *schema_file;
static int schema_id, schema_version, target_version;
static char prefix[NAME_MAX_LEN], upper_prefix[NAME_MAX_LEN];

/* ---------------------------------------------------------------- errors */

static void die_at(int line, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

static void die_at(int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tb-schemagen: %s:%d: ", schema_file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static int line_of(xmlNodePtr n)
{
	return n ? (int)xmlGetLineNo(n) : 0;
}

/* The value of attribute `name` of `n` in buf, or NULL if absent. */
static const char *attr(xmlNodePtr n, const char *name, char *buf, size_t len)
{
	xmlChar *v = xmlGetProp(n, (const xmlChar *)name);

	if (!v)
		return NULL;
	snprintf(buf, len, "%s", (const char *)v);
	xmlFree(v);
	return buf;
}

static const char *req_attr(xmlNodePtr n, const char *name, char *buf,
			    size_t len)
{
	if (!attr(n, name, buf, len))
		die_at(line_of(n), "<%s> is missing the attribute '%s'",
		       (const char *)n->name, name);
	if (!*buf)
		die_at(line_of(n), "<%s>: attribute '%s' is empty",
		       (const char *)n->name, name);
	return buf;
}

static long long parse_ll(xmlNodePtr n, const char *what, const char *s,
			  long long lo, long long hi)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 0);
	if (errno || end == s || *end || v < lo || v > hi)
		die_at(line_of(n), "bad %s '%s': expected an integer from %lld "
		       "to %lld", what, s, lo, hi);
	return v;
}

static long long int_attr(xmlNodePtr n, const char *name, int required,
			  long long dflt, long long lo, long long hi)
{
	char buf[64];

	if (!(required ? req_attr(n, name, buf, sizeof(buf))
		       : attr(n, name, buf, sizeof(buf))))
		return dflt;
	return parse_ll(n, name, buf, lo, hi);
}

static void check_name(xmlNodePtr n, const char *s)
{
	const char *p;

	if (strlen(s) >= NAME_MAX_LEN - 1)
		die_at(line_of(n), "name '%s' is longer than %d characters", s,
		       NAME_MAX_LEN - 2);
	if (!isalpha((unsigned char)s[0]))
		die_at(line_of(n), "name '%s' must start with a letter", s);
	for (p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_')
			die_at(line_of(n), "name '%s' may hold only letters, "
			       "digits and '_'", s);
}

static int is_elem(xmlNodePtr n, const char *name)
{
	return n->type == XML_ELEMENT_NODE &&
	       strcmp((const char *)n->name, name) == 0;
}

/* camelCase -> snake_case (or SNAKE_CASE). */
static void snake(char *out, size_t len, const char *in, int up)
{
	size_t o = 0;
	const char *p;

	for (p = in; *p && o + 2 < len; p++) {
		int c = (unsigned char)*p;

		if (isupper(c) && p != in &&
		    (islower((unsigned char)p[-1]) || isdigit((unsigned char)p[-1]) ||
		     (isupper((unsigned char)p[-1]) && p[1] && islower((unsigned char)p[1]))))
			out[o++] = '_';
		out[o++] = (char)(up ? toupper(c) : tolower(c));
	}
	out[o] = '\0';
}

/* ----------------------------------------------------------------- types */

static int find_prim(const char *s)
{
	int i;

	for (i = 0; i < P_COUNT; i++)
		if (strcmp(prims[i].xml, s) == 0)
			return i;
	return -1;
}

static struct type *find_type(const char *name)
{
	int i;

	for (i = 0; i < ntypes; i++)
		if (strcmp(types[i]->name, name) == 0)
			return types[i];
	return NULL;
}

static struct type *new_type(xmlNodePtr n, const char *name)
{
	struct type *t;

	check_name(n, name);
	if ((t = find_type(name)) != NULL) {
		if (t->builtin)
			die_at(line_of(n), "duplicate name: type '%s' is a "
			       "primitive type", name);
		die_at(line_of(n), "duplicate name: type '%s' is already "
		       "defined at line %d", name, t->line);
	}
	if (ntypes == MAX_ITEMS)
		die_at(line_of(n), "more than %d types", MAX_ITEMS);
	t = calloc(1, sizeof(*t));
	if (!t) {
		fprintf(stderr, "tb-schemagen: out of memory\n");
		exit(1);
	}
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->line = n ? line_of(n) : 0;
	types[ntypes++] = t;
	return t;
}

/* A C literal for `v` of primitive `p`. */
static void c_literal(char *out, size_t len, int p, const char *text,
		      xmlNodePtr n, const char *what)
{
	const struct prim_info *pi = &prims[p];
	char *end;

	errno = 0;
	if (pi->is_signed) {
		long long v = strtoll(text, &end, 0);

		if (errno || end == text || *end || v < pi->min ||
		    v > (long long)pi->max)
			die_at(line_of(n), "bad %s '%s' for %s: expected an "
			       "integer from %lld to %llu", what, text, pi->xml,
			       pi->min, pi->max);
		if (v == pi->min)
			snprintf(out, len, "%s", pi->min_macro);
		else
			snprintf(out, len, "INT64_C(%lld)", v);
	} else {
		unsigned long long v;

		if (p == P_CHAR && strlen(text) == 1 && !isdigit((unsigned char)text[0])) {
			snprintf(out, len, "%d", (unsigned char)text[0]);
			return;
		}
		v = strtoull(text, &end, 0);
		if (errno || end == text || *end || text[0] == '-' || v > pi->max)
			die_at(line_of(n), "bad %s '%s' for %s: expected an "
			       "integer from 0 to %llu", what, text, pi->xml,
			       pi->max);
		if (v == pi->max)
			snprintf(out, len, "%s", pi->max_macro);
		else
			snprintf(out, len, "UINT64_C(%llu)", v);
	}
}

static int presence_of(xmlNodePtr n)
{
	char buf[32];

	if (!attr(n, "presence", buf, sizeof(buf)) || strcmp(buf, "required") == 0)
		return 0;
	if (strcmp(buf, "optional") == 0)
		return 1;
	if (strcmp(buf, "constant") == 0)
		return 2;
	die_at(line_of(n), "bad presence '%s': expected required, optional "
	       "or constant", buf);
}

static int prim_attr(xmlNodePtr n, const char *name)
{
	char buf[64];
	int p;

	req_attr(n, name, buf, sizeof(buf));
	p = find_prim(buf);
	if (p < 0)
		die_at(line_of(n), "unknown type '%s' in %s: expected char, "
		       "int8..int64 or uint8..uint64", buf, name);
	return p;
}

static void parse_simple_type(xmlNodePtr n)
{
	char name[NAME_MAX_LEN], buf[64];
	struct type *t;

	req_attr(n, "name", name, sizeof(name));
	t = new_type(n, name);
	t->kind = K_PRIM;
	t->prim = prim_attr(n, "primitiveType");
	t->length = (int)int_attr(n, "length", 0, 1, 1, 65535);
	if (t->length > 1 && t->prim != P_CHAR)
		die_at(line_of(n), "type '%s': arrays are supported for char "
		       "only", name);
	if (presence_of(n) == 2)
		die_at(line_of(n), "type '%s': constant types are supported "
		       "only inside a composite", name);
	if (attr(n, "nullValue", buf, sizeof(buf)))
		c_literal(t->null_lit, sizeof(t->null_lit), t->prim, buf, n,
			  "nullValue");
	else
		snprintf(t->null_lit, sizeof(t->null_lit), "%s",
			 prims[t->prim].null_macro);
	t->size = prims[t->prim].size * t->length;
}

static void parse_composite(xmlNodePtr n)
{
	char name[NAME_MAX_LEN], buf[64];
	struct type *t;
	xmlNodePtr c;
	int i, has_mantissa = 0, has_exponent = 0;

	req_attr(n, "name", name, sizeof(name));
	t = new_type(n, name);
	t->kind = K_COMPOSITE;
	for (c = n->children; c; c = c->next) {
		struct member *m;

		if (c->type != XML_ELEMENT_NODE)
			continue;
		if (!is_elem(c, "type"))
			die_at(line_of(c), "composite '%s': <%s> is not "
			       "supported, only <type>", name,
			       (const char *)c->name);
		if (t->nm == (int)(sizeof(t->m) / sizeof(t->m[0])))
			die_at(line_of(c), "composite '%s' has too many members",
			       name);
		m = &t->m[t->nm];
		req_attr(c, "name", m->name, sizeof(m->name));
		check_name(c, m->name);
		for (i = 0; i < t->nm; i++)
			if (strcmp(t->m[i].name, m->name) == 0)
				die_at(line_of(c), "duplicate name: composite "
				       "'%s' already has a member '%s'", name,
				       m->name);
		m->prim = prim_attr(c, "primitiveType");
		if (int_attr(c, "length", 0, 1, 1, 1) != 1)
			die_at(line_of(c), "composite members cannot be arrays");
		m->constant = presence_of(c) == 2;
		if (m->constant) {
			xmlChar *txt = xmlNodeGetContent(c);

			snprintf(buf, sizeof(buf), "%s", txt ? (const char *)txt : "");
			xmlFree(txt);
			if (!*buf)
				die_at(line_of(c), "constant '%s' has no value",
				       m->name);
			m->cval = parse_ll(c, "constant", buf,
					   prims[m->prim].is_signed ? prims[m->prim].min : 0,
					   (long long)(prims[m->prim].max > INT64_MAX ?
						       INT64_MAX : prims[m->prim].max));
		} else {
			m->offset = t->size;
			t->size += prims[m->prim].size;
			if (attr(c, "nullValue", buf, sizeof(buf)))
				c_literal(m->null_lit, sizeof(m->null_lit), m->prim,
					  buf, c, "nullValue");
			else
				snprintf(m->null_lit, sizeof(m->null_lit), "%s",
					 prims[m->prim].null_macro);
		}
		t->nm++;
	}
	if (t->size == 0)
		die_at(line_of(n), "composite '%s' has no member that takes room",
		       name);
	/* A decimal: a signed mantissa and a constant exponent, nothing else.
	 * It prints as a number: 101.250000000. */
	for (i = 0; i < t->nm; i++) {
		if (strcmp(t->m[i].name, "mantissa") == 0 && !t->m[i].constant &&
		    prims[t->m[i].prim].is_signed)
			has_mantissa = 1;
		if (strcmp(t->m[i].name, "exponent") == 0 && t->m[i].constant) {
			t->exponent = t->m[i].cval;
			has_exponent = 1;
		}
	}
	t->is_decimal = has_mantissa && has_exponent && t->nm == 2;
	if (t->is_decimal && (t->exponent < -18 || t->exponent > 18))
		die_at(line_of(n), "composite '%s': exponent %lld is out of "
		       "-18..18", name, t->exponent);
}

static void parse_enum(xmlNodePtr n)
{
	char name[NAME_MAX_LEN], buf[64];
	struct type *t;
	xmlNodePtr c;
	int i;

	req_attr(n, "name", name, sizeof(name));
	t = new_type(n, name);
	t->kind = K_ENUM;
	t->prim = prim_attr(n, "encodingType");
	t->length = 1;
	if (t->prim == P_INT64 || t->prim == P_UINT64)
		die_at(line_of(n), "enum '%s': encodingType must be 32 bits or "
		       "narrower", name);
	snprintf(t->null_lit, sizeof(t->null_lit), "%s",
		 prims[t->prim].null_macro);
	t->size = prims[t->prim].size;
	for (c = n->children; c; c = c->next) {
		struct value *v;
		xmlChar *txt;

		if (c->type != XML_ELEMENT_NODE)
			continue;
		if (!is_elem(c, "validValue"))
			die_at(line_of(c), "enum '%s': <%s> is not a validValue",
			       name, (const char *)c->name);
		if (t->nvals == MAX_ITEMS)
			die_at(line_of(c), "enum '%s' has too many values", name);
		v = &t->vals[t->nvals];
		req_attr(c, "name", v->name, sizeof(v->name));
		check_name(c, v->name);
		txt = xmlNodeGetContent(c);
		snprintf(buf, sizeof(buf), "%s", txt ? (const char *)txt : "");
		xmlFree(txt);
		if (t->prim == P_CHAR && strlen(buf) == 1)
			v->v = (unsigned char)buf[0];
		else
			v->v = parse_ll(c, "validValue", buf,
					prims[t->prim].is_signed ? prims[t->prim].min : 0,
					(long long)prims[t->prim].max);
		if (t->prim == P_CHAR ? v->v == 0 :
		    (!prims[t->prim].is_signed &&
		     (unsigned long long)v->v == prims[t->prim].max))
			die_at(line_of(c), "enum '%s': value %lld is the null "
			       "value of %s", name, v->v, prims[t->prim].xml);
		for (i = 0; i < t->nvals; i++) {
			if (strcmp(t->vals[i].name, v->name) == 0)
				die_at(line_of(c), "duplicate name: enum '%s' "
				       "already has '%s'", name, v->name);
			if (t->vals[i].v == v->v)
				die_at(line_of(c), "duplicate value: enum '%s' "
				       "already has %lld ('%s')", name, v->v,
				       t->vals[i].name);
		}
		t->nvals++;
	}
	if (t->nvals == 0)
		die_at(line_of(n), "enum '%s' has no validValue", name);
}

static void parse_types(xmlNodePtr n)
{
	xmlNodePtr c;

	for (c = n->children; c; c = c->next) {
		if (c->type != XML_ELEMENT_NODE)
			continue;
		if (is_elem(c, "type"))
			parse_simple_type(c);
		else if (is_elem(c, "composite"))
			parse_composite(c);
		else if (is_elem(c, "enum"))
			parse_enum(c);
		else
			die_at(line_of(c), "<%s> is not supported in <types> "
			       "(type, composite and enum are)",
			       (const char *)c->name);
	}
}

/* The composite `name` must be made of exactly these uint16 members. */
static void check_header_type(const char *name, const char *const *members,
			      int n, int line)
{
	struct type *t = find_type(name);
	int i;

	if (!t)
		die_at(line, "the schema defines no composite '%s'", name);
	if (t->kind != K_COMPOSITE || t->nm != n)
		goto bad;
	for (i = 0; i < n; i++)
		if (strcmp(t->m[i].name, members[i]) != 0 ||
		    t->m[i].prim != P_UINT16 || t->m[i].constant)
			goto bad;
	return;
bad:
	die_at(t->line, "composite '%s' must hold exactly the uint16 members "
	       "%s, %s%s%s%s%s", name, members[0], members[1],
	       n > 2 ? ", " : "", n > 2 ? members[2] : "",
	       n > 3 ? ", " : "", n > 3 ? members[3] : "");
}

/* -------------------------------------------------------------- messages */

static void parse_field(struct block *b, xmlNodePtr n, int *pos, int *since,
			int *ids, int *nids)
{
	char buf[NAME_MAX_LEN], tname[NAME_MAX_LEN];
	struct field *f;
	int i;

	if (b->nf == MAX_ITEMS)
		die_at(line_of(n), "'%s' has too many fields", b->name);
	f = &b->f[b->nf];
	f->line = line_of(n);
	req_attr(n, "name", f->name, sizeof(f->name));
	check_name(n, f->name);
	f->id = (int)int_attr(n, "id", 1, 0, 0, 65535);
	req_attr(n, "type", tname, sizeof(tname));
	f->t = find_type(tname);
	if (!f->t)
		die_at(f->line, "field '%s': unknown type '%s'", f->name, tname);
	for (i = 0; i < b->nf; i++)
		if (strcmp(b->f[i].name, f->name) == 0)
			die_at(f->line, "duplicate name: '%s' already has a "
			       "field '%s' (line %d)", b->name, f->name,
			       b->f[i].line);
	for (i = 0; i < *nids; i++)
		if (ids[i] == f->id)
			die_at(f->line, "duplicate id %d: field '%s' reuses "
			       "an id of message '%s'", f->id, f->name, b->name);
	ids[(*nids)++] = f->id;
	f->since = (int)int_attr(n, "sinceVersion", 0, b->since, 0, 65535);
	if (f->since > schema_version)
		die_at(f->line, "field '%s': sinceVersion %d is newer than the "
		       "schema version %d", f->name, f->since, schema_version);
	if (f->since < *since)
		die_at(f->line, "field '%s': sinceVersion %d after a field of "
		       "version %d: new fields go at the end of the block",
		       f->name, f->since, *since);
	*since = f->since;
	if (attr(n, "offset", buf, sizeof(buf))) {
		f->offset = (int)parse_ll(n, "offset", buf, 0, 65535);
		if (f->offset < *pos)
			die_at(f->line, "bad offset %d: field '%s' would overlap "
			       "the field before it, which ends at %d",
			       f->offset, f->name, *pos);
	} else {
		f->offset = *pos;
	}
	*pos = f->offset + f->t->size;
	if (*pos > 65535)
		die_at(f->line, "field '%s' ends past 65535 bytes", f->name);
	b->nf++;
}

/* Applies blockLength and --version to a block laid out up to `pos`. */
static void finish_block(struct block *b, xmlNodePtr n, int pos)
{
	int len = (int)int_attr(n, "blockLength", 0, pos, 0, 65535);
	int i, kept = 0, end = 0;

	if (len < pos)
		die_at(line_of(n), "bad blockLength %d: '%s' has fields up to "
		       "byte %d", len, b->name, pos);
	for (i = 0; i < b->nf; i++)
		if (b->f[i].since <= target_version) {
			b->f[kept++] = b->f[i];
			end = b->f[i].offset + b->f[i].t->size;
		}
	b->length = kept == b->nf ? len : end;
	b->nf = kept;
}

static struct block *new_block(xmlNodePtr n, int dflt_since)
{
	struct block *b = calloc(1, sizeof(*b));

	if (!b) {
		fprintf(stderr, "tb-schemagen: out of memory\n");
		exit(1);
	}
	b->line = line_of(n);
	req_attr(n, "name", b->name, sizeof(b->name));
	check_name(n, b->name);
	b->id = (int)int_attr(n, "id", 1, 0, 0, 65535);
	b->since = (int)int_attr(n, "sinceVersion", 0, dflt_since, 0, 65535);
	if (b->since > schema_version)
		die_at(b->line, "'%s': sinceVersion %d is newer than the schema "
		       "version %d", b->name, b->since, schema_version);
	return b;
}

static const char *const header_members[] = {"blockLength", "templateId",
					     "schemaId", "version"};
static const char *const group_members[] = {"blockLength", "numInGroup"};

static struct block *parse_group(struct block *msg, xmlNodePtr n, int *ids,
				 int *nids)
{
	struct block *g = new_block(n, msg->since);
	char dim[NAME_MAX_LEN];
	int pos = 0, since = g->since, i;
	xmlNodePtr c;

	if (g->since < msg->since)
		die_at(g->line, "group '%s' is older than its message", g->name);
	for (i = 0; i < msg->ng; i++)
		if (strcmp(msg->groups[i]->name, g->name) == 0)
			die_at(g->line, "duplicate name: '%s' already has a "
			       "group '%s'", msg->name, g->name);
	for (i = 0; i < *nids; i++)
		if (ids[i] == g->id)
			die_at(g->line, "duplicate id %d: group '%s' reuses an "
			       "id of message '%s'", g->id, g->name, msg->name);
	ids[(*nids)++] = g->id;
	if (!attr(n, "dimensionType", dim, sizeof(dim)))
		snprintf(dim, sizeof(dim), "groupSizeEncoding");
	check_header_type(dim, group_members, 2, g->line);
	if (strcmp(dim, "groupSizeEncoding") != 0)
		die_at(g->line, "group '%s': dimensionType must be "
		       "groupSizeEncoding", g->name);
	for (c = n->children; c; c = c->next) {
		if (c->type != XML_ELEMENT_NODE)
			continue;
		if (is_elem(c, "field"))
			parse_field(g, c, &pos, &since, ids, nids);
		else if (is_elem(c, "group"))
			die_at(line_of(c), "group '%s': nested groups are not "
			       "supported", g->name);
		else
			die_at(line_of(c), "group '%s': <%s> is not supported",
			       g->name, (const char *)c->name);
	}
	if (g->nf == 0)
		die_at(g->line, "group '%s' has no field", g->name);
	finish_block(g, n, pos);
	return g;
}

static void parse_message(xmlNodePtr n)
{
	struct block *m = new_block(n, 1);
	/* ids of the fields and groups: the root's and 16 groups' fields */
	int ids[MAX_ITEMS * 17 + 16], nids = 0, pos = 0, since = m->since, i;
	xmlNodePtr c;

	for (i = 0; i < nmsgs; i++) {
		if (msgs[i]->id == m->id)
			die_at(m->line, "duplicate id %d: message '%s' has the "
			       "id of message '%s' (line %d)", m->id, m->name,
			       msgs[i]->name, msgs[i]->line);
		if (strcmp(msgs[i]->name, m->name) == 0)
			die_at(m->line, "duplicate name: message '%s' is "
			       "already defined at line %d", m->name,
			       msgs[i]->line);
	}
	if (m->id == 0)
		die_at(m->line, "message '%s': id 0 is reserved", m->name);
	for (c = n->children; c; c = c->next) {
		if (c->type != XML_ELEMENT_NODE)
			continue;
		if (is_elem(c, "field")) {
			if (m->ng)
				die_at(line_of(c), "message '%s': field after a "
				       "group; fields come first", m->name);
			parse_field(m, c, &pos, &since, ids, &nids);
		} else if (is_elem(c, "group")) {
			struct block *g;

			if (m->ng == (int)(sizeof(m->groups) / sizeof(m->groups[0])))
				die_at(line_of(c), "message '%s' has more than %d "
				       "groups", m->name, m->ng);
			g = parse_group(m, c, ids, &nids);
			m->groups[m->ng++] = g;
		} else {
			die_at(line_of(c), "message '%s': <%s> is not supported "
			       "(field and group are)", m->name,
			       (const char *)c->name);
		}
	}
	finish_block(m, n, pos);
	{
		int kept = 0;

		for (i = 0; i < m->ng; i++)
			if (m->groups[i]->since <= target_version)
				m->groups[kept++] = m->groups[i];
			else
				free(m->groups[i]);
		m->ng = kept;
	}
	if (m->since > target_version) {
		for (i = 0; i < m->ng; i++)
			free(m->groups[i]);
		free(m);
		return;
	}
	msgs[nmsgs++] = m;
}

/*
 * Generated C names must not clash: a type and a message, or either and
 * the names the generator writes itself, would map to one identifier
 * (Quote and quote, or a message called Group).
 */
static void check_clashes(void)
{
	static const char *const reserved[] = {
		"out", "group", "result", "format", "print", "json",
		"header_decode", "template_name", "strerror", "schema",
	};
	char names[MAX_ITEMS * 2][2 * NAME_MAX_LEN];
	int lines[MAX_ITEMS * 2];
	const char *what[MAX_ITEMS * 2];
	int n = 0, i, j;
	size_t r;

	for (i = 0; i < ntypes; i++)
		if (!types[i]->builtin && types[i]->kind != K_PRIM) {
			snake(names[n], sizeof(names[n]), types[i]->name, 0);
			lines[n] = types[i]->line;
			what[n++] = types[i]->name;
		}
	for (i = 0; i < nmsgs; i++) {
		snake(names[n], sizeof(names[n]), msgs[i]->name, 0);
		lines[n] = msgs[i]->line;
		what[n++] = msgs[i]->name;
	}
	for (i = 0; i < n; i++) {
		for (r = 0; r < sizeof(reserved) / sizeof(reserved[0]); r++)
			if (strcmp(names[i], reserved[r]) == 0)
				die_at(lines[i], "name '%s' clashes with the "
				       "generated %s_%s", what[i], prefix,
				       reserved[r]);
		for (j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				die_at(lines[i], "name '%s' clashes with '%s' "
				       "(line %d): both become %s_%s", what[i],
				       what[j], lines[j], prefix, names[i]);
	}
	for (i = 0; i < ntypes; i++)
		for (j = 0; j < types[i]->nvals; j++)
			if (strcasecmp(types[i]->vals[j].name, "null") == 0)
				die_at(types[i]->line, "enum '%s': a value may not "
				       "be called '%s' (the generator writes "
				       "%s_NULL)", types[i]->name,
				       types[i]->vals[j].name, types[i]->name);
}

static void parse_schema(xmlNodePtr root)
{
	char buf[NAME_MAX_LEN];
	xmlNodePtr c;
	int i;

	if (!is_elem(root, "messageSchema"))
		die_at(line_of(root), "the root element is <%s>, not "
		       "<messageSchema>", (const char *)root->name);
	schema_id = (int)int_attr(root, "id", 1, 0, 0, 65535);
	schema_version = (int)int_attr(root, "version", 1, 0, 1, 65535);
	if (attr(root, "byteOrder", buf, sizeof(buf)) &&
	    strcmp(buf, "littleEndian") != 0)
		die_at(line_of(root), "byteOrder '%s' is not supported: tickbus "
		       "is little-endian", buf);
	if (!prefix[0]) {
		if (!attr(root, "package", buf, sizeof(buf)))
			snprintf(buf, sizeof(buf), "tb_md");
		check_name(root, buf);
		snprintf(prefix, sizeof(prefix), "%s", buf);
	}
	if (target_version == 0)
		target_version = schema_version;
	if (target_version > schema_version)
		die_at(line_of(root), "--version %d is newer than the schema "
		       "version %d", target_version, schema_version);
	for (i = 0; i < P_COUNT; i++) {
		struct type *t = new_type(NULL, prims[i].xml);

		t->builtin = 1;
		t->kind = K_PRIM;
		t->prim = i;
		t->length = 1;
		t->size = prims[i].size;
		snprintf(t->null_lit, sizeof(t->null_lit), "%s", prims[i].null_macro);
	}
	for (c = root->children; c; c = c->next)
		if (is_elem(c, "types"))
			parse_types(c);
	check_header_type("messageHeader", header_members, 4, line_of(root));
	for (c = root->children; c; c = c->next) {
		if (c->type != XML_ELEMENT_NODE || is_elem(c, "types"))
			continue;
		if (!is_elem(c, "message"))
			die_at(line_of(c), "<%s> is not supported in "
			       "<messageSchema> (types and message are)",
			       (const char *)c->name);
		parse_message(c);
	}
	if (nmsgs == 0)
		die_at(line_of(root), "the schema has no message for version %d",
		       target_version);
	check_clashes();
}

/* ---------------------------------------------------------------- output */

static FILE *out;
static xmlDocPtr doc; /* global: still reachable if a schema error exits */
#define W(...) fprintf(out, __VA_ARGS__)

static const char *lo(const char *s)
{
	static char b[4][128];
	static int i;

	i = (i + 1) % 4;
	snake(b[i], sizeof(b[i]), s, 0);
	return b[i];
}

static const char *up(const char *s)
{
	static char b[4][128];
	static int i;

	i = (i + 1) % 4;
	snake(b[i], sizeof(b[i]), s, 1);
	return b[i];
}

static void emit_prelude(void)
{
	const char *P = prefix, *U = upper_prefix;

	W("/*\n * Generated by tb-schemagen from %s (schema id %d, version %d):\n"
	  " * do not edit.  The encoding, evolution rules and result codes are\n"
	  " * described in schema/tickbus.xml and schema/tb-schemagen.c.\n"
	  " *\n"
	  " * Hot path: init, encode, decode and the group iterators are static\n"
	  " * inline, with no allocation, lock or system call.  The print and\n"
	  " * JSON functions are for tools.\n */\n", schema_file, schema_id,
	  target_version);
	W("#ifndef %s_SCHEMA_H\n#define %s_SCHEMA_H\n\n", U, U);
	W("#include <inttypes.h>\n#include <stdarg.h>\n#include <stddef.h>\n"
	  "#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n\n");
	W("_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,\n"
	  "\t       \"the schema is little-endian and structs are copied as is\");\n\n");
	W("#define %s_SCHEMA_ID %d\n#define %s_SCHEMA_VERSION %d\n", U, schema_id,
	  U, target_version);
	W("#define %s_HEADER_LEN 8\n#define %s_GROUP_HEADER_LEN 4\n\n", U, U);
	W("/* Decoder and encoder results (below tickbus_err.h's TB_E* range). */\n"
	  "enum %s_result {\n"
	  "\t%s_ESHORT = -50,    /* buffer shorter than the header or block */\n"
	  "\t%s_EBLOCK = -51,    /* block length too small for its version */\n"
	  "\t%s_EGROUP = -52,    /* group header or entries past the end */\n"
	  "\t%s_ESCHEMA = -53,   /* another schema id */\n"
	  "\t%s_EVERSION = -54,  /* version 0 */\n"
	  "\t%s_ETEMPLATE = -55, /* unknown or unexpected template id */\n"
	  "\t%s_ENOSPACE = -56,  /* encode: the buffer is too small */\n};\n\n",
	  P, U, U, U, U, U, U, U);
	W("static inline const char *%s_strerror(int code)\n{\n\tswitch (code) {\n"
	  "\tcase %s_ESHORT: return \"truncated message: shorter than its header or block\";\n"
	  "\tcase %s_EBLOCK: return \"block length too small for the message version\";\n"
	  "\tcase %s_EGROUP: return \"repeating group runs past the end of the message\";\n"
	  "\tcase %s_ESCHEMA: return \"message of another schema id\";\n"
	  "\tcase %s_EVERSION: return \"message version 0\";\n"
	  "\tcase %s_ETEMPLATE: return \"unknown template id\";\n"
	  "\tcase %s_ENOSPACE: return \"buffer too small for the message\";\n"
	  "\t}\n\treturn code < 0 ? \"unknown error\" : \"ok\";\n}\n\n",
	  P, U, U, U, U, U, U, U);
}

static void emit_types(void)
{
	const char *P = prefix, *U = upper_prefix;
	int i, j;

	for (i = 0; i < ntypes; i++) {
		struct type *t = types[i];

		if (t->builtin)
			continue;
		if (t->kind == K_PRIM) {
			W("#define %s_%s_NULL %s\n", U, up(t->name), t->null_lit);
			if (t->length > 1)
				W("#define %s_%s_LENGTH %d\n", U, up(t->name),
				  t->length);
		} else if (t->kind == K_ENUM) {
			W("\n/* enum %s (%s) */\nenum %s_%s {\n", t->name,
			  prims[t->prim].xml, P, lo(t->name));
			for (j = 0; j < t->nvals; j++)
				W("\t%s_%s_%s = %lld,\n", U, up(t->name),
				  up(t->vals[j].name), t->vals[j].v);
			W("};\n#define %s_%s_NULL %s\n", U, up(t->name), t->null_lit);
			W("static inline const char *%s_%s_name(int64_t v)\n{\n"
			  "\tswitch (v) {\n", P, lo(t->name));
			for (j = 0; j < t->nvals; j++)
				W("\tcase %lld: return \"%s\";\n", t->vals[j].v,
				  t->vals[j].name);
			W("\t}\n\treturn NULL;\n}\n\n");
		} else {
			W("\n/* composite %s */\ntypedef struct __attribute__((packed)) "
			  "%s_%s {\n", t->name, P, lo(t->name));
			for (j = 0; j < t->nm; j++)
				if (!t->m[j].constant)
					W("\t%s %s;\n", prims[t->m[j].prim].ctype,
					  lo(t->m[j].name));
			W("} %s_%s_t;\n", P, lo(t->name));
			W("_Static_assert(sizeof(%s_%s_t) == %d, \"%s size\");\n",
			  P, lo(t->name), t->size, t->name);
			for (j = 0; j < t->nm; j++) {
				if (t->m[j].constant) {
					W("#define %s_%s_%s (%lld)\n", U, up(t->name),
					  up(t->m[j].name), t->m[j].cval);
					continue;
				}
				W("_Static_assert(offsetof(%s_%s_t, %s) == %d, "
				  "\"%s.%s offset\");\n", P, lo(t->name),
				  lo(t->m[j].name), t->m[j].offset, t->name,
				  t->m[j].name);
				W("#define %s_%s_%s_NULL %s\n", U, up(t->name),
				  up(t->m[j].name), t->m[j].null_lit);
			}
			W("static inline void %s_%s_set_null(%s_%s_t *c)\n{\n", P,
			  lo(t->name), P, lo(t->name));
			for (j = 0; j < t->nm; j++)
				if (!t->m[j].constant)
					W("\tc->%s = %s;\n", lo(t->m[j].name),
					  t->m[j].null_lit);
			W("}\n\n");
		}
	}
}

/* Output helpers, shared by every printer of this prefix. */
static void emit_out_helpers(void)
{
	const char *P = prefix;

	W("/* ------------------------------------------------ text and JSON output */\n\n");
	W("typedef struct %s_out {\n\tchar *buf;\n\tsize_t cap, len;\n"
	  "\tint json, first;\n} %s_out_t;\n\n", P, P);
	W("static inline void %s_out_put(%s_out_t *o, const char *fmt, ...)\n"
	  "\t__attribute__((format(printf, 2, 3)));\n", P, P);
	W("static inline void %s_out_put(%s_out_t *o, const char *fmt, ...)\n{\n"
	  "\tva_list ap;\n\tint n;\n\n\tva_start(ap, fmt);\n"
	  "\tn = vsnprintf(o->len < o->cap ? o->buf + o->len : NULL,\n"
	  "\t\t      o->len < o->cap ? o->cap - o->len : 0, fmt, ap);\n"
	  "\tva_end(ap);\n\tif (n > 0)\n\t\to->len += (size_t)n;\n}\n\n", P, P);
	W("static inline void %s_out_key(%s_out_t *o, const char *key)\n{\n"
	  "\tif (o->json)\n\t\t%s_out_put(o, \"%%s\\\"%%s\\\":\", o->first ? \"\" : \",\", key);\n"
	  "\telse\n\t\t%s_out_put(o, \"%%s%%s=\", o->first ? \"\" : \" \", key);\n"
	  "\to->first = 0;\n}\n\n", P, P, P, P);
	W("static inline void %s_out_null(%s_out_t *o)\n{\n"
	  "\t%s_out_put(o, \"null\");\n}\n\n", P, P, P);
	W("static inline void %s_out_uint(%s_out_t *o, uint64_t v, uint64_t null)\n{\n"
	  "\tif (v == null)\n\t\t%s_out_null(o);\n\telse\n"
	  "\t\t%s_out_put(o, \"%%\" PRIu64, v);\n}\n\n", P, P, P, P);
	W("static inline void %s_out_int(%s_out_t *o, int64_t v, int64_t null)\n{\n"
	  "\tif (v == null)\n\t\t%s_out_null(o);\n\telse\n"
	  "\t\t%s_out_put(o, \"%%\" PRId64, v);\n}\n\n", P, P, P, P);
	W("static inline void %s_out_enum(%s_out_t *o, const char *name, int64_t v,\n"
	  "\t\t\t\t   int64_t null)\n{\n"
	  "\tif (v == null)\n\t\t%s_out_null(o);\n"
	  "\telse if (name)\n\t\t%s_out_put(o, o->json ? \"\\\"%%s\\\"\" : \"%%s\", name);\n"
	  "\telse\n\t\t%s_out_put(o, \"%%\" PRId64, v);\n}\n\n", P, P, P, P, P);
	W("/* A char array up to its first NUL; JSON-escaped, or in text with\n"
	  " * spaces and unprintables as \\\\xHH so that a line splits on spaces. */\n"
	  "static inline void %s_out_chars(%s_out_t *o, const char *s, size_t n)\n{\n"
	  "\tsize_t i;\n\n\tif (o->json)\n\t\t%s_out_put(o, \"\\\"\");\n"
	  "\tfor (i = 0; i < n && s[i]; i++) {\n"
	  "\t\tunsigned char c = (unsigned char)s[i];\n\n"
	  "\t\tif (o->json && (c == '\"' || c == '\\\\'))\n"
	  "\t\t\t%s_out_put(o, \"\\\\%%c\", c);\n"
	  "\t\telse if (o->json && (c < 0x20 || c >= 0x7f))\n"
	  "\t\t\t%s_out_put(o, \"\\\\u%%04x\", c);\n"
	  "\t\telse if (!o->json && (c <= 0x20 || c >= 0x7f || c == '\\\\'))\n"
	  "\t\t\t%s_out_put(o, \"\\\\x%%02x\", c);\n"
	  "\t\telse\n\t\t\t%s_out_put(o, \"%%c\", c);\n\t}\n"
	  "\tif (o->json)\n\t\t%s_out_put(o, \"\\\"\");\n}\n\n", P, P, P, P, P, P, P, P);
	W("/* mantissa x 10^exponent as a decimal number (a JSON number too). */\n"
	  "static inline void %s_out_decimal(%s_out_t *o, int64_t m, int exponent,\n"
	  "\t\t\t\t      int64_t null)\n{\n"
	  "\tuint64_t a, scale = 1;\n\tint i;\n\n"
	  "\tif (m == null) {\n\t\t%s_out_null(o);\n\t\treturn;\n\t}\n"
	  "\ta = m < 0 ? (uint64_t)0 - (uint64_t)m : (uint64_t)m;\n"
	  "\tif (exponent >= 0) {\n"
	  "\t\t%s_out_put(o, \"%%s%%\" PRIu64 \"%%.*s\", m < 0 ? \"-\" : \"\", a,\n"
	  "\t\t\t     a ? exponent : 0, \"000000000000000000\");\n\t\treturn;\n\t}\n"
	  "\tfor (i = 0; i < -exponent; i++)\n\t\tscale *= 10;\n"
	  "\t%s_out_put(o, \"%%s%%\" PRIu64 \".%%0*\" PRIu64, m < 0 ? \"-\" : \"\",\n"
	  "\t\t     a / scale, -exponent, a %% scale);\n}\n\n", P, P, P, P, P);
}

/* The expression that stores the null value into field `f` of `obj`. */
static void emit_set_null(const char *obj, const struct field *f)
{
	const struct type *t = f->t;

	if (t->kind == K_COMPOSITE)
		W("%s_%s_set_null(&%s->%s);", prefix, lo(t->name), obj, lo(f->name));
	else if (t->length > 1)
		W("memset(%s->%s, 0, sizeof(%s->%s));", obj, lo(f->name), obj,
		  lo(f->name));
	else
		W("%s->%s = %s;", obj, lo(f->name), t->null_lit);
}

static void emit_print_field(const char *obj, const struct field *f,
			     const char *ind)
{
	const struct type *t = f->t;
	const char *P = prefix;
	int j;

	W("%s%s_out_key(o, \"%s\");\n", ind, P, f->name);
	if (t->kind == K_ENUM) {
		W("%s%s_out_enum(o, %s_%s_name(%s->%s), %s->%s, %s);\n", ind, P, P,
		  lo(t->name), obj, lo(f->name), obj, lo(f->name), t->null_lit);
	} else if (t->kind == K_PRIM && t->length > 1) {
		W("%s%s_out_chars(o, %s->%s, sizeof(%s->%s));\n", ind, P, obj,
		  lo(f->name), obj, lo(f->name));
	} else if (t->kind == K_PRIM && t->prim == P_CHAR) {
		W("%s%s_out_chars(o, &%s->%s, 1);\n", ind, P, obj, lo(f->name));
	} else if (t->kind == K_PRIM) {
		W("%s%s_out_%s(o, %s->%s, %s);\n", ind, P,
		  prims[t->prim].is_signed ? "int" : "uint", obj, lo(f->name),
		  t->null_lit);
	} else if (t->is_decimal) {
		W("%s%s_out_decimal(o, %s->%s.mantissa, %lld, %s);\n", ind, P, obj,
		  lo(f->name), t->exponent, t->m[0].constant ? t->m[1].null_lit
							      : t->m[0].null_lit);
	} else {
		W("%s%s_out_put(o, \"{\");\n%so->first = 1;\n", ind, P, ind);
		for (j = 0; j < t->nm; j++) {
			const struct member *m = &t->m[j];

			if (m->constant)
				continue;
			W("%s%s_out_key(o, \"%s\");\n", ind, P, m->name);
			W("%s%s_out_%s(o, %s->%s.%s, %s);\n", ind, P,
			  prims[m->prim].is_signed ? "int" : "uint", obj,
			  lo(f->name), lo(m->name), m->null_lit);
		}
		W("%s%s_out_put(o, \"}\");\n", ind, P);
	}
}

/* The struct of a block with explicit padding, and its asserts. */
static void emit_struct(const struct block *b, const char *cname,
			const char *what)
{
	int pos = 0, i;

	W("typedef struct __attribute__((packed)) %s {\n", cname);
	for (i = 0; i < b->nf; i++) {
		const struct field *f = &b->f[i];
		const struct type *t = f->t;

		if (f->offset > pos)
			W("\tuint8_t pad_%d[%d];\n", pos, f->offset - pos);
		if (t->kind == K_COMPOSITE)
			W("\t%s_%s_t %s;", prefix, lo(t->name), lo(f->name));
		else if (t->length > 1)
			W("\tchar %s[%d];", lo(f->name), t->length);
		else
			W("\t%s %s;", prims[t->prim].ctype, lo(f->name));
		W(" /* %s, id %d%s */\n", t->name, f->id,
		  f->since > 1 ? (f->since == 2 ? ", since version 2" : ", newer") : "");
		pos = f->offset + t->size;
	}
	if (b->length > pos)
		W("\tuint8_t pad_%d[%d];\n", pos, b->length - pos);
	W("} %s_t;\n", cname);
	W("_Static_assert(sizeof(%s_t) == %d, \"%s block length\");\n", cname,
	  b->length, what);
	for (i = 0; i < b->nf; i++)
		W("_Static_assert(offsetof(%s_t, %s) == %d, \"%s.%s offset\");\n",
		  cname, lo(b->f[i].name), b->f[i].offset, what, b->f[i].name);
}

/* Block bytes a sender of version `v` must send: the end of its fields. */
static void emit_min_block(const struct block *b, const char *var)
{
	int i, v, need;

	W("\t%s = 0;\n", var);
	for (v = 1; v <= target_version; v++) {
		need = 0;
		for (i = 0; i < b->nf; i++)
			if (b->f[i].since <= v)
				need = b->f[i].offset + b->f[i].t->size;
		if (need)
			W("\tif (version >= %d)\n\t\t%s = %d;\n", v, var, need);
	}
}

/* Nulls the fields a (version, block length) sender did not send. */
static void emit_absent(const struct block *b, const char *obj)
{
	int i;

	for (i = 0; i < b->nf; i++) {
		const struct field *f = &b->f[i];

		W("\tif (version < %d || block < %d)\n\t\t", f->since,
		  f->offset + f->t->size);
		emit_set_null(obj, f);
		W("\n");
	}
}

static void emit_message(const struct block *m)
{
	const char *P = prefix, *U = upper_prefix;
	char n[160], N[160], gname[200], gtype[220];
	int i, j;

	snprintf(n, sizeof(n), "%s_%s", P, lo(m->name));
	snprintf(N, sizeof(N), "%s_%s", U, up(m->name));
	W("\n/* ------------------------------------------------ %s (template %d) */\n\n",
	  m->name, m->id);
	W("#define %s_TEMPLATE_ID %d\n#define %s_BLOCK_LENGTH %d\n", N, m->id, N,
	  m->length);
	emit_struct(m, n, m->name);
	for (i = 0; i < m->ng; i++) {
		const struct block *g = m->groups[i];

		snprintf(gname, sizeof(gname), "%s_%s", n, lo(g->name));
		snprintf(gtype, sizeof(gtype), "%s_entry", gname);
		W("\n/* group %s.%s (id %d): entries of %d bytes */\n", m->name,
		  g->name, g->id, g->length);
		W("#define %s_%s_BLOCK_LENGTH %d\n", N, up(g->name), g->length);
		emit_struct(g, gtype, g->name);
		W("\nstatic inline void %s_init(%s_t *e)\n{\n"
		  "\tmemset(e, 0, sizeof(*e));\n", gtype, gtype);
		for (j = 0; j < g->nf; j++) {
			W("\t");
			emit_set_null("e", &g->f[j]);
			W("\n");
		}
		W("}\n\n");
		W("/* The next entry of a group returned by %s_decode: 1 and the\n"
		  " * entry in `e` (fields its sender did not know are null), or 0 at\n"
		  " * the end.  Reads only inside the bounds decode checked. */\n",
		  n);
		W("static inline int %s_next(%s_group_t *it, %s_t *e)\n{\n"
		  "\tuint16_t version = it->version, block = it->block_length;\n\n"
		  "\tif (it->index >= it->count)\n\t\treturn 0;\n"
		  "\tif (block >= sizeof(*e)) {\n"
		  "\t\tmemcpy(e, it->data + (size_t)it->index * block, sizeof(*e));\n"
		  "\t} else {\n\t\tmemset(e, 0, sizeof(*e));\n"
		  "\t\tmemcpy(e, it->data + (size_t)it->index * block, block);\n\t}\n"
		  "\tit->index++;\n", gname, P, gtype);
		emit_absent(g, "e");
		W("\treturn 1;\n}\n");
	}
	if (m->ng) {
		W("\ntypedef struct %s_groups {\n", n);
		for (i = 0; i < m->ng; i++)
			W("\t%s_group_t %s;\n", P, lo(m->groups[i]->name));
		W("} %s_groups_t;\n", n);
	}

	/* init */
	W("\n/* All fields null (padding zero). */\n"
	  "static inline void %s_init(%s_t *m)\n{\n\tmemset(m, 0, sizeof(*m));\n",
	  n, n);
	for (i = 0; i < m->nf; i++) {
		W("\t");
		emit_set_null("m", &m->f[i]);
		W("\n");
	}
	W("}\n\n");

	/* encoded length */
	W("static inline size_t %s_encoded_len(", n);
	for (i = 0; i < m->ng; i++)
		W("%suint16_t n_%s", i ? ", " : "", lo(m->groups[i]->name));
	W("%s)\n{\n\treturn %s_HEADER_LEN + sizeof(%s_t)", m->ng ? "" : "void", U, n);
	for (i = 0; i < m->ng; i++)
		W(" +\n\t       %s_GROUP_HEADER_LEN + (size_t)n_%s * sizeof(%s_%s_entry_t)",
		  U, lo(m->groups[i]->name), n, lo(m->groups[i]->name));
	W(";\n}\n\n");

	/* encode */
	W("/* Writes header, block%s into buf[0..cap).  Returns the\n"
	  " * bytes written or %s_ENOSPACE.  Hot path. */\n",
	  m->ng ? " and groups" : "", U);
	W("static inline int64_t %s_encode(void *buf, size_t cap, const %s_t *m", n, n);
	for (i = 0; i < m->ng; i++)
		W(",\n\t\tconst %s_%s_entry_t *%s, uint16_t n_%s", n,
		  lo(m->groups[i]->name), lo(m->groups[i]->name),
		  lo(m->groups[i]->name));
	W(")\n{\n\t%s_message_header_t h;\n", P);
	if (m->ng)
		W("\t%s_group_size_encoding_t gh;\n", P);
	W("\tuint8_t *p = (uint8_t *)buf;\n\tsize_t len = %s_encoded_len(", n);
	for (i = 0; i < m->ng; i++)
		W("%sn_%s", i ? ", " : "", lo(m->groups[i]->name));
	W(");\n\n\tif (cap < len)\n\t\treturn %s_ENOSPACE;\n", U);
	W("\th.block_length = (uint16_t)sizeof(*m);\n"
	  "\th.template_id = %s_TEMPLATE_ID;\n\th.schema_id = %s_SCHEMA_ID;\n"
	  "\th.version = %s_SCHEMA_VERSION;\n"
	  "\tmemcpy(p, &h, sizeof(h));\n\tp += sizeof(h);\n"
	  "\tmemcpy(p, m, sizeof(*m));\n", N, U, U);
	{
		int pos = 0;

		for (i = 0; i < m->nf; i++) {
			if (m->f[i].offset > pos)
				W("\tmemset(p + %d, 0, %d);\n", pos,
				  m->f[i].offset - pos);
			pos = m->f[i].offset + m->f[i].t->size;
		}
		if (m->length > pos)
			W("\tmemset(p + %d, 0, %d);\n", pos, m->length - pos);
	}
	W("\tp += sizeof(*m);\n");
	for (i = 0; i < m->ng; i++) {
		const char *g = lo(m->groups[i]->name);

		W("\tgh.block_length = (uint16_t)sizeof(%s_%s_entry_t);\n"
		  "\tgh.num_in_group = n_%s;\n\tmemcpy(p, &gh, sizeof(gh));\n"
		  "\tp += sizeof(gh);\n"
		  "\tif (n_%s)\n\t\tmemcpy(p, %s, (size_t)n_%s * sizeof(*%s));\n"
		  "\tp += (size_t)n_%s * sizeof(*%s);\n", n, g, g, g, g, g, g, g, g);
	}
	W("\treturn (int64_t)len;\n}\n\n");

	/* decode */
	W("/*\n * Reads a %s from buf[0..len): checks the header (schema id, template,\n"
	  " * version), that the block holds every field of the sender's version,\n"
	  " * and that %s fit%s in `len`; never reads past it.  Fields\n"
	  " * newer than the sender are null; bytes newer than this decoder are\n"
	  " * skipped.  Returns the bytes the message occupies, or a %s_E* code\n"
	  " * (with the message zeroed and no group entries).  Hot path.\n */\n", m->name, m->ng ? "the block and every group" : "the block",
	  m->ng ? "" : "s", U);
	W("static inline int64_t %s_decode(const void *buf, size_t len, %s_t *m%s%s%s)\n{\n",
	  n, n, m->ng ? ", " : "", m->ng ? n : "", m->ng ? "_groups_t *g" : "");
	W("\tconst uint8_t *p = (const uint8_t *)buf;\n\t%s_message_header_t h;\n"
	  "\tuint16_t version, block, need;\n\tsize_t pos;\n", P);
	if (m->ng)
		W("\t%s_group_size_encoding_t gh;\n\tsize_t bytes;\n\tint64_t rc;\n",
		  P);
	W("\n\tmemset(m, 0, sizeof(*m)); /* defined even on error */\n");
	if (m->ng)
		W("\tmemset(g, 0, sizeof(*g));\n");
	W("\tif (len < %s_HEADER_LEN)\n\t\treturn %s_ESHORT;\n"
	  "\tmemcpy(&h, p, sizeof(h));\n"
	  "\tif (h.schema_id != %s_SCHEMA_ID)\n\t\treturn %s_ESCHEMA;\n"
	  "\tif (h.template_id != %s_TEMPLATE_ID)\n\t\treturn %s_ETEMPLATE;\n"
	  "\tif (h.version == 0)\n\t\treturn %s_EVERSION;\n"
	  "\tversion = h.version;\n\tblock = h.block_length;\n", U, U, U, U, N,
	  U, U);
	emit_min_block(m, "need");
	W("\tif (block < need)\n\t\treturn %s_EBLOCK;\n"
	  "\tif (len - %s_HEADER_LEN < block)\n\t\treturn %s_ESHORT;\n"
	  "\tmemcpy(m, p + %s_HEADER_LEN, block < sizeof(*m) ? block : sizeof(*m));\n",
	  U, U, U, U);
	emit_absent(m, "m");
	W("\tpos = %s_HEADER_LEN + (size_t)block;\n", U);
	for (i = 0; i < m->ng; i++) {
		const struct block *gb = m->groups[i];
		const char *g = lo(gb->name);

		W("\tg->%s.version = version;\n", g);
		W("\tif (version >= %d) {\n", gb->since);
		W("\t\tif (len - pos < %s_GROUP_HEADER_LEN) {\n"
		  "\t\t\trc = %s_EGROUP;\n\t\t\tgoto fail;\n\t\t}\n"
		  "\t\tmemcpy(&gh, p + pos, sizeof(gh));\n\t\tpos += sizeof(gh);\n", U, U);
		/* minimum entry block for the sender's version */
		W("\t\t{\n");
		{
			int v, k, nd;

			W("\t\t\tneed = 0;\n");
			for (v = 1; v <= target_version; v++) {
				nd = 0;
				for (k = 0; k < gb->nf; k++)
					if (gb->f[k].since <= v)
						nd = gb->f[k].offset + gb->f[k].t->size;
				if (nd)
					W("\t\t\tif (version >= %d)\n\t\t\t\tneed = %d;\n",
					  v, nd);
			}
			W("\t\t\tif (gh.num_in_group && gh.block_length < need) {\n"
			  "\t\t\t\trc = %s_EBLOCK;\n\t\t\t\tgoto fail;\n"
			  "\t\t\t}\n\t\t}\n", U);
		}
		W("\t\tbytes = (size_t)gh.num_in_group * gh.block_length;\n"
		  "\t\tif (len - pos < bytes) {\n\t\t\trc = %s_EGROUP;\n"
		  "\t\t\tgoto fail;\n\t\t}\n"
		  "\t\tg->%s.data = p + pos;\n\t\tg->%s.count = gh.num_in_group;\n"
		  "\t\tg->%s.block_length = gh.block_length;\n\t\tpos += bytes;\n\t}\n",
		  U, g, g, g);
	}
	W("\treturn (int64_t)pos;\n");
	if (m->ng)
		W("fail:\n\t/* the block was read: undone, as promised */\n"
		  "\tmemset(m, 0, sizeof(*m));\n\tmemset(g, 0, sizeof(*g));\n"
		  "\treturn rc;\n");
	W("}\n\n");

	/* printers */
	W("static inline void %s_out(%s_out_t *o, const %s_t *m%s%s%s)\n{\n", n, P,
	  n, m->ng ? ", const " : "", m->ng ? n : "", m->ng ? "_groups_t *g" : "");
	W("\t%s_out_put(o, o->json ? \"{\\\"type\\\":\\\"%s\\\"\" : \"%s\");\n"
	  "\to->first = 0;\n", P, m->name, m->name);
	for (i = 0; i < m->nf; i++)
		emit_print_field("m", &m->f[i], "\t");
	for (i = 0; i < m->ng; i++) {
		const struct block *gb = m->groups[i];
		const char *g = lo(gb->name);

		W("\t{\n\t\t%s_group_t it = g->%s;\n\t\t%s_%s_entry_t x, *e = &x;\n"
		  "\t\tint k = 0;\n\n", P, g, n, g);
		W("\t\t%s_out_key(o, \"%s\");\n\t\t%s_out_put(o, \"[\");\n"
		  "\t\twhile (%s_%s_next(&it, e)) {\n"
		  "\t\t\t%s_out_put(o, \"%%s{\", k++ ? (o->json ? \",\" : \" \") : \"\");\n"
		  "\t\t\to->first = 1;\n", P, gb->name, P, n, g, P);
		for (j = 0; j < gb->nf; j++)
			emit_print_field("e", &gb->f[j], "\t\t\t");
		W("\t\t\t%s_out_put(o, \"}\");\n\t\t}\n\t\t%s_out_put(o, \"]\");\n\t}\n",
		  P, P);
	}
	W("\tif (o->json)\n\t\t%s_out_put(o, \"}\");\n}\n\n", P);
	for (j = 0; j < 2; j++) {
		W("/* The message as %s, NUL-terminated in out[0..cap); returns the\n"
		  " * length it needs (as snprintf: >= cap means truncated). */\n",
		  j ? "one JSON object" : "one line of text (\"Name key=value ...\")");
		W("static inline int %s_%s(const %s_t *m%s%s%s, char *out, size_t cap)\n{\n"
		  "\t%s_out_t o = {out, cap, 0, %d, 1};\n\n"
		  "\tif (cap)\n\t\tout[0] = '\\0';\n"
		  "\t%s_out(&o, m%s);\n\treturn (int)o.len;\n}\n\n",
		  n, j ? "json" : "print", n, m->ng ? ", const " : "",
		  m->ng ? n : "", m->ng ? "_groups_t *g" : "", P, j, n,
		  m->ng ? ", g" : "");
	}
}

static void emit_dispatch(void)
{
	const char *P = prefix, *U = upper_prefix;
	int i;

	W("\n/* ------------------------------------------------------ any message */\n\n");
	W("/* Name of a template id of this schema, or NULL. */\n"
	  "static inline const char *%s_template_name(uint16_t id)\n{\n\tswitch (id) {\n", P);
	for (i = 0; i < nmsgs; i++)
		W("\tcase %d: return \"%s\";\n", msgs[i]->id, msgs[i]->name);
	W("\t}\n\treturn NULL;\n}\n\n");
	W("/* Reads the message header of buf[0..len): %s_HEADER_LEN, or\n"
	  " * %s_ESHORT, %s_ESCHEMA or %s_EVERSION. */\n"
	  "static inline int %s_header_decode(const void *buf, size_t len,\n"
	  "\t\t\t\t      %s_message_header_t *h)\n{\n"
	  "\tif (len < %s_HEADER_LEN)\n\t\treturn %s_ESHORT;\n"
	  "\tmemcpy(h, buf, sizeof(*h));\n"
	  "\tif (h->schema_id != %s_SCHEMA_ID)\n\t\treturn %s_ESCHEMA;\n"
	  "\tif (h->version == 0)\n\t\treturn %s_EVERSION;\n"
	  "\treturn %s_HEADER_LEN;\n}\n\n", U, U, U, U, P, P, U, U, U, U, U, U);
	W("/*\n * Decodes any message of this schema in buf[0..len) and writes it as\n"
	  " * text (json 0) or one JSON object (json 1) into out[0..cap).  Returns\n"
	  " * the length needed (as snprintf) or a %s_E* code, with out empty.\n */\n"
	  "static inline int %s_format(const void *buf, size_t len, int json,\n"
	  "\t\t\t\tchar *out, size_t cap)\n{\n"
	  "\t%s_message_header_t h;\n\t%s_out_t o = {out, cap, 0, json, 1};\n"
	  "\tint64_t rc = %s_header_decode(buf, len, &h);\n\n"
	  "\tif (cap)\n\t\tout[0] = '\\0';\n\tif (rc < 0)\n\t\treturn (int)rc;\n"
	  "\tswitch (h.template_id) {\n", U, P, P, P, P);
	for (i = 0; i < nmsgs; i++) {
		const char *n = lo(msgs[i]->name);

		W("\tcase %d: {\n\t\t%s_%s_t m;\n", msgs[i]->id, P, n);
		if (msgs[i]->ng)
			W("\t\t%s_%s_groups_t g;\n\n"
			  "\t\tif ((rc = %s_%s_decode(buf, len, &m, &g)) < 0)\n"
			  "\t\t\treturn (int)rc;\n\t\t%s_%s_out(&o, &m, &g);\n", P, n,
			  P, n, P, n);
		else
			W("\n\t\tif ((rc = %s_%s_decode(buf, len, &m)) < 0)\n"
			  "\t\t\treturn (int)rc;\n\t\t%s_%s_out(&o, &m);\n", P, n, P, n);
		W("\t\treturn (int)o.len;\n\t}\n");
	}
	W("\t}\n\treturn %s_ETEMPLATE;\n}\n\n", U);
	W("static inline int %s_print(const void *buf, size_t len, char *out, size_t cap)\n"
	  "{\n\treturn %s_format(buf, len, 0, out, cap);\n}\n\n", P, P);
	W("static inline int %s_json(const void *buf, size_t len, char *out, size_t cap)\n"
	  "{\n\treturn %s_format(buf, len, 1, out, cap);\n}\n\n", P, P);
}

static void emit(void)
{
	int i;

	emit_prelude();
	emit_types();
	W("\n/* A repeating group as decode found it: `count` entries of\n"
	  " * `block_length` bytes at `data`, all inside the checked buffer. */\n"
	  "typedef struct %s_group {\n\tconst uint8_t *data;\n"
	  "\tuint16_t block_length, count, index, version;\n} %s_group_t;\n\n",
	  prefix, prefix);
	emit_out_helpers();
	for (i = 0; i < nmsgs; i++)
		emit_message(msgs[i]);
	emit_dispatch();
	W("#endif\n");
}

/* ------------------------------------------------------------------ main */

static char xml_error[512];
static int xml_error_line;

#if LIBXML_VERSION >= 21200
static void on_xml_error(void *ctx, const xmlError *e)
#else
static void on_xml_error(void *ctx, xmlErrorPtr e)
#endif
{
	size_t n;

	(void)ctx;
	if (xml_error[0] || !e || e->level < XML_ERR_ERROR)
		return;
	snprintf(xml_error, sizeof(xml_error), "%s", e->message ? e->message : "error");
	n = strlen(xml_error);
	while (n && xml_error[n - 1] == '\n')
		xml_error[--n] = '\0';
	xml_error_line = e->line;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: tb-schemagen [--version N] [--prefix NAME] -o OUT.h SCHEMA.xml\n"
"Turns an SBE-style XML schema into a C header of structs, encoders,\n"
"decoders and printers.\n"
"  -o, --output FILE   header to write (written whole or not at all)\n"
"      --version N     only what a version-N peer knows (default: the\n"
"                      schema's version)\n"
"      --prefix NAME   prefix of every generated name (default: the\n"
"                      schema's package attribute)\n"
"  -h, --help          this text\n"
"Exit status 0, 1 for a schema error (FILE:LINE: what), 2 for usage.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, 0, 'o'},
		{"version", required_argument, 0, 'V'},
		{"prefix", required_argument, 0, 'p'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *output = NULL;
	char tmp[4096];
	int c, i;

	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o': output = optarg; break;
		case 'V': {
			char *end;
			long v = strtol(optarg, &end, 10);

			if (*end || v < 1 || v > 65535) {
				fprintf(stderr, "tb-schemagen: --version '%s': "
					"expected 1..65535\n", optarg);
				return 2;
			}
			target_version = (int)v;
			break;
		}
		case 'p':
			snprintf(prefix, sizeof(prefix), "%s", optarg);
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!output || optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	schema_file = argv[optind];
	if (prefix[0])
		check_name(NULL, prefix);

	{
		FILE *f = fopen(schema_file, "r");

		if (!f) {
			fprintf(stderr, "tb-schemagen: %s: %s\n", schema_file,
				strerror(errno));
			return 1;
		}
		fclose(f);
	}
	xmlSetStructuredErrorFunc(NULL, on_xml_error);
	doc = xmlReadFile(schema_file, NULL, XML_PARSE_NONET | XML_PARSE_NOBLANKS);
	if (!doc || xml_error[0]) {
		if (doc)
			xmlFreeDoc(doc);
		xmlCleanupParser();
		fprintf(stderr, "tb-schemagen: %s:%d: malformed XML: %s\n",
			schema_file, xml_error_line,
			xml_error[0] ? xml_error : "cannot be read");
		return 1;
	}
	parse_schema(xmlDocGetRootElement(doc));
	xmlFreeDoc(doc);
	doc = NULL;
	xmlCleanupParser();
	snake(upper_prefix, sizeof(upper_prefix), prefix, 1);

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", output, (int)getpid());
	out = fopen(tmp, "w");
	if (!out) {
		fprintf(stderr, "tb-schemagen: %s: %s\n", tmp, strerror(errno));
		return 1;
	}
	emit();
	if (fclose(out) != 0 || rename(tmp, output) != 0) {
		fprintf(stderr, "tb-schemagen: %s: %s\n", output, strerror(errno));
		remove(tmp);
		return 1;
	}
	for (i = 0; i < nmsgs; i++) {
		for (c = 0; c < msgs[i]->ng; c++)
			free(msgs[i]->groups[c]);
		free(msgs[i]);
	}
	for (i = 0; i < ntypes; i++)
		free(types[i]);
	return 0;
}
