/*
 * attention_cudnn.cpp — cuDNN's fused SDPA for the bf16 CUDA table
 * (attention_cudnn.h says what and why). Host code only: it builds cuDNN
 * frontend graphs and runs them on the table's stream.
 *
 * Layout: the table keeps q (B, T, H, hd); cuDNN's SDPA tensors are
 * (B, heads, T, hd) with any strides, so the same memory is described as
 * dims {B, H, T, hd}, strides {T H hd, hd, H hd, 1} (and KV for k and v):
 * no copies. The statistics are (B, H, T, 1) fp32.
 */
#include "attention_cudnn.h"

#include <stdio.h>
#include <string.h>

#ifndef ZRT_CUDNN_SDPA

extern "C" int zrt_cudnn_sdpa_open(void*, char* why, size_t n) {
    snprintf(why, n, "built without the cuDNN frontend's headers (make deps installs them)");
    return -1;
}
extern "C" const char* zrt_cudnn_sdpa_version(void) { return ""; }
extern "C" int zrt_cudnn_sdpa_forward(ZDevice*, uint16_t*, float*, const uint16_t*, const uint16_t*,
                                      const uint16_t*, int, int, int, int, int, char* why, size_t n) {
    return zrt_cudnn_sdpa_open(nullptr, why, n);
}
extern "C" int zrt_cudnn_sdpa_backward(ZDevice*, uint16_t*, uint16_t*, uint16_t*, const uint16_t*, const uint16_t*,
                                       const float*, const uint16_t*, const uint16_t*, const uint16_t*, int, int, int,
                                       int, int, char* why, size_t n) {
    return zrt_cudnn_sdpa_open(nullptr, why, n);
}

#else

#include <dlfcn.h>
#include <math.h>

#include <cudnn_frontend.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

namespace fe = cudnn_frontend;

/* the frontend's dynamic loading reads cuDNN's symbols from this handle */
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace {

cudnnHandle_t g_handle;
int g_open = 0; /* 0 not tried, 1 open, -1 failed (g_why) */
char g_why[256], g_version[32];
std::mutex g_mu;

/* uids of the graphs' tensors */
enum : int64_t { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV };

struct Plan {
    std::shared_ptr<fe::graph::Graph> g;
    int64_t workspace = 0;
    std::string why; /* non-empty: no plan for this shape */
};
using Key = std::tuple<int, int, int, int, int, int>; /* backward?, B, T, H, KV, hd */
std::map<Key, Plan> g_plans;
void* g_ws = nullptr;
size_t g_ws_cap = 0;

std::shared_ptr<fe::graph::Tensor_attributes> heads_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                           int B, int T, int NH, int hd) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({B, NH, T, hd})
                        .set_stride({(int64_t)T * NH * hd, hd, (int64_t)NH * hd, 1}));
}

void heads_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid, int B, int T, int NH, int hd) {
    t->set_output(true).set_uid(uid).set_dim({B, NH, T, hd}).set_stride({(int64_t)T * NH * hd, hd, (int64_t)NH * hd, 1});
}

/* Builds (or finds) the graph of one direction and shape. */
Plan& plan_for(int backward, int B, int T, int H, int KV, int hd) {
    const Key key{backward, B, T, H, KV, hd};
    auto it = g_plans.find(key);
    if (it != g_plans.end()) return it->second;
    Plan& p = g_plans[key];
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto q = heads_tensor(*g, "q", U_Q, B, T, H, hd), k = heads_tensor(*g, "k", U_K, B, T, KV, hd),
         v = heads_tensor(*g, "v", U_V, B, T, KV, hd);
    const float scale = 1.0f / sqrtf((float)hd);
    if (!backward) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("sdpa")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);
        auto [o, stats] = g->sdpa(q, k, v, opt);
        heads_output(o, U_O, B, T, H, hd);
        stats->set_output(true)
            .set_uid(U_STATS)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim({B, H, T, 1})
            .set_stride({(int64_t)H * T, T, 1, 1}); // the table's lse (B, H, T)
    } else {
        auto o = heads_tensor(*g, "o", U_O, B, T, H, hd), d_o = heads_tensor(*g, "do", U_DO, B, T, H, hd);
        auto stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(U_STATS)
                                   .set_dim({B, H, T, 1})
                                   .set_stride({(int64_t)H * T, T, 1, 1})
                                   .set_data_type(fe::DataType_t::FLOAT));
        // deterministic: the runtime's runs repeat their bits (no atomics in dQ)
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("sdpa_backward")
                       .set_deterministic_algorithm(true)
                       .set_attn_scale(scale)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, opt);
        heads_output(dq, U_DQ, B, T, H, hd);
        heads_output(dk, U_DK, B, T, KV, hd);
        heads_output(dv, U_DV, B, T, KV, hd);
    }
    fe::error_t e = g->validate();
    if (e.is_good()) e = g->build_operation_graph(g_handle);
    if (e.is_good()) e = g->create_execution_plans({fe::HeurMode_t::A});
    if (e.is_good()) e = g->check_support(g_handle);
    if (e.is_good()) e = g->build_plans(g_handle);
    if (e.is_good()) e = g->get_workspace_size(p.workspace);
    if (e.is_bad()) p.why = "cuDNN has no SDPA " + std::string(backward ? "backward" : "forward") + " plan for (B " +
                            std::to_string(B) + ", T " + std::to_string(T) + ", H " + std::to_string(H) + ", KV " +
                            std::to_string(KV) + ", hd " + std::to_string(hd) + "): " + e.get_message();
    else p.g = g;
    return p;
}

int run_locked(ZDevice* dev, int backward, int B, int T, int H, int KV, int hd,
               std::unordered_map<int64_t, void*>& ptrs, char* why, size_t n) {
    if (g_open != 1) {
        snprintf(why, n, "%s", g_open ? g_why : "cuDNN not opened");
        return -1;
    }
    Plan& p = plan_for(backward, B, T, H, KV, hd);
    if (!p.g) {
        snprintf(why, n, "%s", p.why.c_str());
        return -1;
    }
    if ((size_t)p.workspace > g_ws_cap) {
        zdev_free(dev, g_ws);
        g_ws = zdev_alloc(dev, (size_t)p.workspace);
        g_ws_cap = g_ws ? (size_t)p.workspace : 0;
        if (!g_ws) {
            snprintf(why, n, "cuDNN SDPA workspace of %lld bytes: %s", (long long)p.workspace, zdev_error());
            return -1;
        }
    }
    fe::error_t e = p.g->execute(g_handle, ptrs, g_ws);
    if (e.is_bad()) {
        snprintf(why, n, "cuDNN SDPA %s: %s", backward ? "backward" : "forward", e.get_message().c_str());
        return -1;
    }
    return 0;
}

/* One direction on one shape; the frontend's exceptions become a reason. */
int run(ZDevice* dev, int backward, int B, int T, int H, int KV, int hd, std::unordered_map<int64_t, void*> ptrs,
        char* why, size_t n) {
    std::lock_guard<std::mutex> lock(g_mu);
    try {
        return run_locked(dev, backward, B, T, H, KV, hd, ptrs, why, n);
    } catch (const std::exception& ex) {
        snprintf(why, n, "cuDNN SDPA %s: %s", backward ? "backward" : "forward", ex.what());
        return -1;
    }
}

} // namespace

extern "C" int zrt_cudnn_sdpa_open(void* stream, char* why, size_t n) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_open) {
        g_open = -1;
        cudnn_frontend::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
        if (!cudnn_frontend::cudnn_dlhandle) {
            const char* e = dlerror();
            snprintf(g_why, sizeof g_why, "libcudnn.so.9 not found (%s)", e ? e : "dlopen failed");
        } else {
            try {
                const size_t v = fe::detail::get_backend_version();
                snprintf(g_version, sizeof g_version, "cuDNN %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
                cudnnStatus_t s = fe::detail::create_handle(&g_handle);
                if (s == CUDNN_STATUS_SUCCESS) s = fe::detail::set_stream(g_handle, (cudaStream_t)stream);
                if (s != CUDNN_STATUS_SUCCESS)
                    snprintf(g_why, sizeof g_why, "%s: no handle (status %d)", g_version, (int)s);
                else if (v < 90000)
                    snprintf(g_why, sizeof g_why, "%s: SDPA here wants cuDNN 9", g_version);
                else
                    g_open = 1;
            } catch (const std::exception& ex) {
                snprintf(g_why, sizeof g_why, "cuDNN: %s", ex.what());
            }
        }
    }
    if (g_open != 1) snprintf(why, n, "%s", g_why);
    return g_open == 1 ? 0 : -1;
}

extern "C" const char* zrt_cudnn_sdpa_version(void) { return g_open == 1 ? g_version : ""; }

extern "C" int zrt_cudnn_sdpa_forward(ZDevice* dev, uint16_t* o, float* stats, const uint16_t* q, const uint16_t* k,
                                      const uint16_t* v, int B, int T, int H, int KV, int hd, char* why, size_t n) {
    return run(dev, 0, B, T, H, KV, hd,
               {{U_Q, (void*)q}, {U_K, (void*)k}, {U_V, (void*)v}, {U_O, o}, {U_STATS, stats}}, why, n);
}

extern "C" int zrt_cudnn_sdpa_backward(ZDevice* dev, uint16_t* dq, uint16_t* dk, uint16_t* dv, const uint16_t* do_,
                                       const uint16_t* o, const float* stats, const uint16_t* q, const uint16_t* k,
                                       const uint16_t* v, int B, int T, int H, int KV, int hd, char* why, size_t n) {
    return run(dev, 1, B, T, H, KV, hd,
               {{U_Q, (void*)q}, {U_K, (void*)k}, {U_V, (void*)v}, {U_O, (void*)o}, {U_DO, (void*)do_},
                {U_STATS, (void*)stats}, {U_DQ, dq}, {U_DK, dk}, {U_DV, dv}},
               why, n);
}

#endif
