/* scrape.h -- the mounters' /metrics, fetched over their unix sockets and merged into
 * the node plugin's own (kegfs-csi --metrics).
 *
 * Prometheus' text format wants each metric family once: its HELP and TYPE lines,
 * then all its samples together.  Every mounter serves the same families, so the
 * texts are not concatenated but merged family by family, each sample labelled with
 * the mounter it came from (mounter="<publish id>": two mounters of one volume on one
 * node never make the same series).
 */
#ifndef KEG_CSI_SCRAPE_H
#define KEG_CSI_SCRAPE_H

#include <stddef.h>
#include <stdio.h>

#define CSI_SCRAPE_MOUNTER_MS 1000      /* one mounter's answer */
#define CSI_SCRAPE_TOTAL_MS   1500      /* all of them together */
#define CSI_SCRAPE_MAX_BYTES  (4u << 20) /* one mounter's text; more is a failed scrape */

/* One mounter to scrape. */
struct csi_scrape_src {
    const char *socket;   /* its metrics socket (absolute path) */
    const char *id;       /* the value of its mounter label */
};

/* Families merged so far. */
struct csi_scrape;

/* OWNERSHIP: caller frees with csi_scrape_free().  Returns 0 or -ENOMEM. */
int  csi_scrape_new(struct csi_scrape **out);
void csi_scrape_free(struct csi_scrape *m);

/* Merge the exposition text (len bytes) of mounter id: every sample gets the label
 * mounter="id" first.  Dropped: families named kegfs_csi_* (the plugin's own), samples
 * before any # TYPE / # HELP or not of the family declared above them, samples of a
 * family whose TYPE differs from the one already merged, malformed samples and
 * samples that already carry a mounter label.  BORROWS text and id.
 * Returns the number of samples taken, or -ENOMEM. */
int  csi_scrape_add(struct csi_scrape *m, const char *text, size_t len, const char *id);

/* Write every family once, in the order they were first seen: # HELP, # TYPE, then the
 * samples of every text added. */
void csi_scrape_write(const struct csi_scrape *m, FILE *f);

/* GET /metrics from every src at once (libcurl over the unix socket), each within
 * timeout_ms and all within deadline_ms, and csi_scrape_add() each answer that is a
 * 200 of at most CSI_SCRAPE_MAX_BYTES.  *failed gets the count of the others (no
 * socket, refused, timed out, an error status).  Never waits longer than deadline_ms
 * (plus the time to merge).  Thread-safe if curl_global_init() was called.
 * Returns 0, or -ENOMEM / -EIO (libcurl unusable: every src counted failed). */
int  csi_scrape_fetch(struct csi_scrape *m, const struct csi_scrape_src *src, size_t n,
                      unsigned timeout_ms, unsigned deadline_ms, size_t *failed);

#endif
