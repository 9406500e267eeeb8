// test: timeout=60 asan=yes
/*
 * test_tune_twolevel.c — zipcclTuneEstimateTwoLevel (comm/tune/tune.h), the
 * cost model the projection (runtime/project.h) prices collectives with on a
 * two-level cluster, against the one-link model it extends and against the
 * alpha-beta sums written out by hand from docs/COLLECTIVES.md's designs:
 *   (a) one node, or nodes of one rank: the one-link model on the intra
 *       (inter) link, for every kind and flat design; hier in one node is
 *       raw, hier with nodes of one rank codes every hop;
 *   (b) flat direct on two links: a rank's bytes split over its peers in and
 *       out of the node, the more loaded link setting the pace (by hand);
 *   (c) hier AllGather raw: the ring across nodes, then the ring in the
 *       node (by hand); hier ReduceScatter: the exchange to the stations,
 *       then forward or chain as hierReduceScatter chooses;
 *   (d) the serial codec (the device path): wire + codec + each call's
 *       fixed cost, by hand, and never below the pipelined estimate;
 *   (e) hier compressed beats flat compressed where the node's link is
 *       faster than the codec and the nodes' slower than both, and loses to
 *       it where the node's link is the slow one;
 *   (f) zipcclTuneDecide with a declared node link picks hier where it
 *       pays, and without one never.
 * Pure functions: one process, no MPI.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "transport.h" /* the zipcclTp* capability flags */
#include "tune.h"
#include "zipccl.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-15; }

static zipcclTuneModel link(double alpha, double beta) {
    zipcclTuneModel m;
    zipcclTuneInit(&m);
    m.alpha = alpha, m.beta = beta;
    return m;
}

static double two(const zipcclTuneModel* a, const zipcclTuneModel* b, int k, zipcclCollKind_t kind,
                  zipcclDataType_t dt, double bytes, int n, zipcclStrategy_t s, zipcclAlgo_t algo) {
    const zipcclTuneQuery q = {kind, dt, bytes, n, 1 << 20, 0, 1, 0};
    zipcclTuneDesign d = {s, zipcclCodecFast, algo, "", 0};
    return zipcclTuneEstimateTwoLevel(a, b, k, 1, &q, &d);
}

static double one(const zipcclTuneModel* m, zipcclCollKind_t kind, zipcclDataType_t dt, double bytes, int n,
                  zipcclStrategy_t s, zipcclAlgo_t algo) {
    const zipcclTuneQuery q = {kind, dt, bytes, n, 1 << 20, 0, 1, 0};
    zipcclTuneDesign d = {s, zipcclCodecFast, algo, "", 0};
    return zipcclTuneEstimate(m, &q, &d);
}

int main(void) {
    const zipcclTuneModel in = link(3e-6, 300e9), out = link(20e-6, 25e9);
    const zipcclCollKind_t kinds[4] = {zipcclCollAllGather, zipcclCollReduceScatter, zipcclCollAllReduce,
                                       zipcclCollAlltoAll};
    const zipcclStrategy_t strat[3] = {zipcclStrategyNative, zipcclStrategyRaw, zipcclStrategyCompressed};
    const zipcclAlgo_t algos[2] = {zipcclAlgoDirect, zipcclAlgoRing};
    char name[160];

    /* (a) */
    int bad_one = 0, bad_unit = 0;
    for (int ki = 0; ki < 4; ki++)
        for (int si = 0; si < 3; si++)
            for (int ai = 0; ai < 2; ai++) {
                const double b = 3.0 * (1 << 20);
                bad_one += !near(two(&in, &out, 8, kinds[ki], zipcclBfloat16, b, 8, strat[si], algos[ai]),
                                 one(&in, kinds[ki], zipcclBfloat16, b, 8, strat[si], algos[ai]));
                bad_unit += !near(two(&in, &out, 1, kinds[ki], zipcclBfloat16, b, 8, strat[si], algos[ai]),
                                  one(&out, kinds[ki], zipcclBfloat16, b, 8, strat[si], algos[ai]));
            }
    CHECK(!bad_one, "one_node_is_the_intra_link", "%d of 24 designs differ", bad_one);
    CHECK(!bad_unit, "nodes_of_one_rank_are_the_inter_link", "%d of 24 designs differ", bad_unit);
    for (int ki = 0; ki < 4; ki++) {
        const double b = 1 << 22;
        snprintf(name, sizeof name, "hier_in_one_node_is_raw/%s", zipcclCollName(kinds[ki]));
        CHECK(near(two(&in, &out, 4, kinds[ki], zipcclBfloat16, b, 4, zipcclStrategyCompressed, zipcclAlgoHier),
                   one(&in, kinds[ki], zipcclBfloat16, b, 4, zipcclStrategyRaw, zipcclAlgoDirect)),
              name, "differs");
        snprintf(name, sizeof name, "hier_with_one_rank_nodes_codes_every_hop/%s", zipcclCollName(kinds[ki]));
        CHECK(near(two(&in, &out, 1, kinds[ki], zipcclBfloat16, b, 4, zipcclStrategyCompressed, zipcclAlgoHier),
                   one(&out, kinds[ki], zipcclBfloat16, b, 4, zipcclStrategyCompressed, zipcclAlgoDirect)),
              name, "differs");
    }

    /* (b) raw direct AllGather of a 512 KiB block at 8 ranks as 2 x 4: 7
     * messages of one piece, 3/7 of the bytes in the node, 4/7 out of it */
    {
        const double b = 512 << 10, send = 7 * b;
        const double beta = fmin(300e9 / (3.0 / 7), 25e9 / (4.0 / 7));
        const double want = 7 * 20e-6 + send / beta;
        const double got = two(&in, &out, 4, zipcclCollAllGather, zipcclBfloat16, b, 8, zipcclStrategyRaw,
                               zipcclAlgoDirect);
        CHECK(near(got, want), "flat_direct_two_links_by_hand", "%.9g s, by hand %.9g s", got, want);
    }

    /* a flat raw ring AllGather at 2 x 4 on one NIC per node: the boundary's
     * hop gets the node's NIC (4 x the per-rank share), the node's hops
     * are faster, so every hop runs at the NIC */
    {
        const double b = 256 << 10;
        const double want = 7 * 20e-6 + 7 * b / (25e9 * 4);
        const double got = two(&in, &out, 4, zipcclCollAllGather, zipcclBfloat16, b, 8, zipcclStrategyRaw,
                               zipcclAlgoRing);
        CHECK(near(got, want), "flat_ring_crosses_on_one_nic_by_hand", "%.9g s, by hand %.9g s", got, want);
    }

    /* (c) hier AllGather raw at 4 x 2 (k = 2, N = 4), a 256 KiB block: the
     * ring of 4 over the nodes' link (3 messages, 3 blocks), then the ring
     * of 2 in the node over 4 blocks (1 message of one 1 MiB piece) */
    {
        const double b = 256 << 10;
        const double want = (3 * 20e-6 + 3 * b / 25e9) + (1 * 3e-6 + 4 * b / 300e9);
        const double got = two(&in, &out, 2, zipcclCollAllGather, zipcclBfloat16, b, 8, zipcclStrategyRaw,
                               zipcclAlgoHier);
        CHECK(near(got, want), "hier_allgather_by_hand", "%.9g s, by hand %.9g s", got, want);
    }
    /* hier ReduceScatter raw fp32 at 2 x 2 (forward: N*4 >= (N-1)*k*4), a 1 MiB
     * buffer: the stations' exchange in the node, then the stations'
     * exchange across nodes (the flat direct design's bytes between them) */
    {
        const double b = 1 << 20;
        const double want = one(&in, zipcclCollAlltoAll, zipcclFloat32, b, 2, zipcclStrategyRaw, zipcclAlgoDirect) +
                            one(&out, zipcclCollAlltoAll, zipcclFloat32, b, 2, zipcclStrategyRaw, zipcclAlgoDirect);
        const double got = two(&in, &out, 2, zipcclCollReduceScatter, zipcclFloat32, b, 4, zipcclStrategyRaw,
                               zipcclAlgoHier);
        CHECK(near(got, want), "hier_reducescatter_forward", "%.9g s, expected %.9g s", got, want);
        /* 2 x 8 in bf16 chooses the chain: a ring of fp32 partials over the 2 stations */
        const double want2 =
            one(&in, zipcclCollAlltoAll, zipcclBfloat16, b, 8, zipcclStrategyRaw, zipcclAlgoDirect) +
            one(&out, zipcclCollReduceScatter, zipcclBfloat16, b / 8, 2, zipcclStrategyRaw, zipcclAlgoRing);
        const double got2 = two(&in, &out, 8, zipcclCollReduceScatter, zipcclBfloat16, b, 16, zipcclStrategyRaw,
                                zipcclAlgoHier);
        CHECK(near(got2, want2), "hier_reducescatter_chain", "%.9g s, expected %.9g s", got2, want2);
    }

    /* (d) the serial codec: compressed direct AllGather of a 512 KiB bf16
     * block at 4 ranks on one link: 3 messages; one encode, 3 decodes */
    {
        zipcclTuneModel s = out;
        s.serialCodec = 1, s.codecCallS = 400e-6;
        const double b = 512 << 10, ratio = s.ratio[zipcclCollAllGather][0][0];
        const double wire = (3 * b / ratio + 3 * 28) / 25e9;
        const double codec = b / s.enc[0] + 3 * b / s.dec[0] + 3 * 2e-6;
        const double want = 3 * 20e-6 + wire + codec + 4 * 400e-6;
        const double got = two(&s, &s, 1, zipcclCollAllGather, zipcclBfloat16, b, 4, zipcclStrategyCompressed,
                               zipcclAlgoDirect);
        CHECK(near(got, want), "serial_codec_by_hand", "%.9g s, by hand %.9g s", got, want);
        const double piped = two(&out, &out, 1, zipcclCollAllGather, zipcclBfloat16, b, 4,
                                 zipcclStrategyCompressed, zipcclAlgoDirect);
        CHECK(got > piped, "serial_codec_slower_than_pipelined", "%.9g <= %.9g", got, piped);
    }

    /* (e) 64 MiB per rank's AllGather block and 64 MiB ReduceScatter at 4 x 2:
     * NVLink-like node (300 GB/s), codec 100 GB/s, 25 GB/s between nodes */
    {
        zipcclTuneModel a = in, o = out;
        for (int c = 0; c < ZIPCCL_MODEL_CODECS; c++) a.enc[c] = a.dec[c] = o.enc[c] = o.dec[c] = 100e9;
        a.memBw = o.memBw = 2000e9;
        const double b = 64.0 * (1 << 20);
        for (int ki = 0; ki < 2; ki++) {
            const double h = two(&a, &o, 2, kinds[ki], zipcclBfloat16, b, 8, zipcclStrategyCompressed,
                                 zipcclAlgoHier),
                         f = two(&a, &o, 2, kinds[ki], zipcclBfloat16, b, 8, zipcclStrategyCompressed,
                                 zipcclAlgoDirect);
            snprintf(name, sizeof name, "hier_beats_flat_where_the_node_is_fast/%s", zipcclCollName(kinds[ki]));
            CHECK(h < f, name, "hier %.6g s, flat %.6g s", h, f);
            /* swap the links: the node's is now the slow one */
            const double h2 = two(&o, &a, 2, kinds[ki], zipcclBfloat16, b, 8, zipcclStrategyCompressed,
                                  zipcclAlgoHier),
                         f2 = two(&o, &a, 2, kinds[ki], zipcclBfloat16, b, 8, zipcclStrategyCompressed,
                                  zipcclAlgoDirect);
            snprintf(name, sizeof name, "hier_loses_where_the_node_is_slow/%s", zipcclCollName(kinds[ki]));
            CHECK(h2 > f2, name, "hier %.6g s, flat %.6g s", h2, f2);
        }
    }
    /* (f) zipcclTuneDecide with a declared intra-node link (intraBeta):
     * every design priced on two levels, so at 2 x 2 with a fast node and
     * 1 Gbit/s between nodes a large AllGather picks a hier design, with
     * the node's link as slow as the nodes' it does not, and without a
     * declared node link (the one-link model) it never does. */
    {
        zipcclTuneModel m = link(50e-6, 1e9 / 8); /* between nodes: 1 Gbit/s */
        const zipcclTuneQuery q = {zipcclCollAllGather, zipcclBfloat16, 4.0 * (1 << 20), 4, 65536,
                                   zipcclTpHostControl | zipcclTpRing, 1, 2};
        zipcclTuneDesign cand[ZIPCCL_TUNE_NDESIGNS];
        int nc = 0, b;
        b = zipcclTuneDecide(&m, &q, cand, &nc);
        const int noDecl = cand[b].algo != zipcclAlgoHier;
        const double flatNoDecl = cand[b].t;
        m.intraBeta = 100e9 / 8, m.intraAlpha = 5e-6;
        b = zipcclTuneDecide(&m, &q, cand, &nc);
        const int fast = cand[b].algo == zipcclAlgoHier;
        char best[64];
        snprintf(best, sizeof best, "%s %.3f ms", cand[b].name, cand[b].t * 1e3);
        m.intraBeta = m.beta, m.intraAlpha = m.alpha;
        b = zipcclTuneDecide(&m, &q, cand, &nc);
        const int slow = cand[b].algo != zipcclAlgoHier;
        CHECK(noDecl && fast && slow, "decide_prices_hier_with_a_declared_node_link",
              "one link: flat (%d, %.3f ms); node 100 Gbit/s: hier (%d: %s); node as slow as the nodes: flat (%d)",
              noDecl, flatNoDecl * 1e3, fast, best, slow);
    }
    return tu_exit();
}
