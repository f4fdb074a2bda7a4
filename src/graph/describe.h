/* graph/describe.h: the model graph as canonical text: its inputs, then each layer's ops (the
 * `act:` node included), their inputs, arguments, output shapes and dtypes, and parameters (ties
 * included), one line each (format in describe.c). Graphs with equal descriptions compute the same
 * function of the same parameters (the converse can fail: an argument spelled out at its default
 * reads as a change); a checkpoint records it (metadata "graph") and a resume compares it, naming
 * the first line that differs. Placement, recomputation and file positions are not part of it. */
#ifndef BT_GRAPH_DESCRIBE_H
#define BT_GRAPH_DESCRIBE_H

#include <stddef.h>

#include "baton/graph.h"
#include "baton/status.h"

/* *out: the description (malloc'ed, every line ending in a newline; the caller frees it). */
bt_status bt_graph_describe(const bt_graph *graph, char **out);
/* The first line (from 1) at which descriptions a and b differ, 0 when they are equal; that line
 * of each (*line_a, *len_a bytes, no newline; NULL where the text has no such line). */
int bt_graph_describe_diff(const char *a, const char *b, const char **line_a, size_t *len_a, const char **line_b,
                           size_t *len_b);

#endif
