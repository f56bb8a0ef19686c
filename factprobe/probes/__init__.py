"""The built-in probes: one module each, registered with `factprobe.framework.registry.register`.

IC-LKE (`ic_lke`), EIC-LKE (`eic_lke`), the prompt baselines HGP/MMP (`prompt_lke`), multiple-choice items
(`mc_items`), QA (`qa`), counterfactual ICL (`counterfactual`), coherency (`coherency`) and BELIEF
(`belief_icl`, `belief_mlm`), with what some of them share (`mc`, the BELIEF and QA reporting modules).
What a probe is, and what runs it, is `factprobe.framework`.
"""
