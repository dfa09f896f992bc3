"""Named simulator scenarios (config overrides) behind ``wmrl simulate --scenario NAME``.

Each one isolates one claim of the paper (or one failure of its Assumption 6); the defaults of
``SimulatorConfig`` are the ``default`` scenario. ``--scenario all`` runs every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    overrides: tuple[str, ...]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "default",
            "overconfident world model: monotone, concave phi(r) = r^0.3 plus noise 0.03 (biased)",
            (),
        ),
        Scenario(
            "harsh",
            "where WMRL falls short: phi(r) = r^0.3 with noise 0.05 and risky ambitious approaches (crash"
            " slope 0.5); near the top phi is flat, noise blurs the best approaches together and the"
            " isotonic map E[r | r_hat] regresses them to the mean, a bias no monotone map can remove",
            ("simulator.wm_noise=0.05", "simulator.crash_slope=0.5", "simulator.target_score=0.35"),
        ),
        Scenario(
            "fallback_noise",
            "uninformative world model: r_hat is uniform noise, independent of r (paper §3.4 fallback)",
            ("simulator.phi=noise",),
        ),
        Scenario(
            "degrade",
            "a good world model (identity phi, noise 0.03) whose noise jumps to 0.3 at mid-run",
            ("simulator.phi=identity", "simulator.degrade_step=200", "simulator.degrade_noise=0.3"),
        ),
        Scenario(
            "nonmonotone",
            "non-monotone bias: phi over-rates a band of mediocre solutions (bump at r=0.35)",
            ("simulator.phi=bump", "simulator.phi_param=0.5"),
        ),
        Scenario(
            "noise_free",
            "a noise-free world model with an intercept (phi(r) = 0.2 + 0.6 r, noise 0): rho stays at 1 and the"
            " audit stays silent",
            ("simulator.phi=0.2 + 0.6*r", "simulator.wm_noise=0"),
        ),
        Scenario(
            "task_offset",
            "bias that differs by task: the default world model with r_hat 0.2 lower on half the tasks; no"
            " global map can correct it, and the audit must name it",
            ("simulator.wm_task_offset=-0.2",),
        ),
        Scenario(
            "saturating",
            "a world model that saturates at the top: phi(r) = min(0.9, 0.15 + 1.5 r), noise 0.03; it inflates"
            " mediocre solutions (every r >= 0.5 reads 0.9), so it cannot rank the approaches worth learning;"
            " monotone, so Assumption 6 holds, and the flat_top audit check must warn",
            ("simulator.phi=min(0.9, 0.15 + 1.5*r)",),
        ),
        Scenario(
            "monotone_stationary",
            "monotone stationary bias (logistic phi, slope 6, noise 0.02): Assumption 6 holds, the audit must stay silent",
            ("simulator.phi=logistic", "simulator.phi_param=6", "simulator.wm_noise=0.02"),
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}, all") from None
