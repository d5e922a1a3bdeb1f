/*
 * Runs the race library (kernel/npu/pa_sim_races.cpp: small kernels with one synchronisation defect each, and
 * their fixed twins) as one-cluster launches of the device-path simulation, checked: the emulator executes every
 * intrinsic, the pipes retire out of order, and the hazard checker, initcheck and the exit checks judge them as
 * they judge the decode kernel.
 */
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "pa_kernel_abi.h"
#include "pa_mock_api.h"
#include "devsim_sched.hpp"

extern "C" void pa_sim_race_body_cube(int32_t index, int32_t fixed, int32_t role, uint8_t *const *gm);
extern "C" void pa_sim_race_body_vec(int32_t index, int32_t fixed, int32_t role, uint8_t *const *gm);
extern "C" int32_t pa_sim_race_count(void);

namespace {

constexpr size_t kElems = 4096;

}  // namespace

extern "C" int32_t pa_sim_race_run(int32_t index, int32_t fixed, pa_mock_error *err)
{
    using namespace pa::devsim;
    if (err != nullptr) std::memset(err, 0, sizeof(*err));
    if (index < 0 || index >= pa_sim_race_count()) return PA_ERR_BAD_LAUNCH;
    /* fresh, finite inputs (the mad operand check rejects a non-finite one); the written buffers poisoned */
    std::vector<float> a(kElems, 1.0f), b(kElems, 0.5f);
    std::vector<uint16_t> in(kElems, 0x3400 /* fp16 0.25 */), h(kElems, 0x7e00 /* fp16 NaN */);
    uint8_t *gm[4] = {reinterpret_cast<uint8_t *>(a.data()), reinterpret_cast<uint8_t *>(b.data()),
                      reinterpret_cast<uint8_t *>(in.data()), reinterpret_cast<uint8_t *>(h.data())};
    const uint64_t bytes[4] = {a.size() * 4, b.size() * 4, in.size() * 2, h.size() * 2};
    const char *names[4] = {"s", "o_tmp", "q", "p"};
    const int slots[4] = {PA_ARG_S, PA_ARG_O_TMP, PA_ARG_Q, PA_ARG_P};
    LaunchConfig cfg;
    cfg.blockDim = 1;
    cfg.seed = 1;
    for (int i = 0; i < 4; ++i) {
        const uint64_t start = reinterpret_cast<uint64_t>(gm[i]);
        cfg.gmBuffers.emplace_back(start, bytes[i]);
        cfg.classes.push_back({start, start + bytes[i], i == 2 ? 0 : 2, slots[i]});
        if (i != 2) cfg.watched.push_back({{start, bytes[i]}, names[i]});
    }
    cfg.body = [&](uint32_t, int role) {
        (role == 0 ? pa_sim_race_body_cube : pa_sim_race_body_vec)(index, fixed, role, gm);
    };
    Figures figures;
    std::string error;
    try {
        error = RunLaunch(cfg, figures);
    } catch (const std::exception &e) {
        error = e.what();
    }
    if (error.empty()) return PA_OK;
    const int32_t code = error.find("HAZARD") != std::string::npos ? PA_ERR_HAZARD : PA_ERR_INTERNAL;
    if (err != nullptr) {
        err->code = code;
        err->arg_slot = err->core = err->seq = err->head = err->split = -1;
        std::snprintf(err->message, sizeof err->message, "%s", error.c_str());
    }
    return code;
}
