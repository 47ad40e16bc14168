"""One kernel of the synthetic workloads (`Kernel`), the builder the catalogues write them with (`kernel`),
the install paths their launch sites live under, and the AMD GEMM name pattern both models use."""

from __future__ import annotations

from dataclasses import dataclass

SGL = "/sgl-workspace/sglang/python/sglang/srt"
TORCH = "/usr/local/lib/python3.12/dist-packages/torch"


@dataclass(frozen=True)
class Kernel:
    name: str
    category: str
    base_ns: int  # duration at the reference batch size, before jitter
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    regs: int  # registers per thread (NVIDIA args only)
    smem: int  # shared memory bytes
    file: str  # launch site: innermost Python frame around the launch
    line: int
    func: str
    cpu_op: str  # aten / custom op that wraps the launch in eager mode
    api: str = (
        "rt"  # "rt": cudaLaunchKernel/hipLaunchKernel; "drv": cuLaunchKernelEx/hipExtModuleLaunchKernel
    )
    collective: str = ""  # collective name for communication kernels ("allreduce"...)
    scales: bool = True  # duration grows with the batch/token count


def kernel(name, cat, ns, grid, block, regs, smem, site, cpu_op, api="rt", collective="", scales=True):
    file, line, func = site
    return Kernel(name, cat, ns, grid, block, regs, smem, file, line, func, cpu_op, api, collective, scales)


CIJK = (
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT{t}_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
    "DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMBSK_GLS0_ISA942_IU1_K1_LDSTI0_LBSPPA2048_"
    "LBSPPB1024_LBSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT4_2_MO40_NTn1_NTA0_NTB0_NTC0_NTD4_NTM0_NEPBS16_"
    "NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW4_SK0_SKFTR0_SKXCCM0_TLDS1_ULSGRO0_USL1_"
    "UIOFGRO0_USFGROn1_VSn1_VWA4_VWB2_WSGRA0_WSGRB0_WS64_WG16_4_4"
)
