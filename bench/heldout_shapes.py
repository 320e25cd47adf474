"""bench/heldout_shapes.py: the held-out trace shapes bench.heldout replays, by name (each
shape's description: bench/heldout.py's docstring, in the order they were written)."""

from __future__ import annotations

from bench.heldout_agents import doc_fanout, doc_window, tool_agent
from bench.heldout_bank_kyc import bank_kyc
from bench.heldout_bi_copilot import bi_copilot
from bench.heldout_call_center import call_center
from bench.heldout_catalog_backfill import catalog_backfill
from bench.heldout_ci_triage import ci_triage
from bench.heldout_claims import insurance_claims
from bench.heldout_clinical_scribe import clinical_scribe
from bench.heldout_compaction_chat import compaction_chat
from bench.heldout_companion_chat import companion_chat
from bench.heldout_course_grading import course_grading
from bench.heldout_ediscovery_review import ediscovery_review
from bench.heldout_early import (agent, code_edit, drift, loop, mooncake, rag_bursty,
                                 tenants)
from bench.heldout_eval import batch_eval
from bench.heldout_fewshot import fewshot_lora
from bench.heldout_finres import fin_research
from bench.heldout_gateway import api_gateway
from bench.heldout_legal_review import legal_review
from bench.heldout_localization import localization
from bench.heldout_logistics_dispatch import logistics_dispatch
from bench.heldout_manufacturing_qc import manufacturing_qc
from bench.heldout_ide import ide_tree
from bench.heldout_marketplace import marketplace
from bench.heldout_media_pipeline import media_pipeline
from bench.heldout_meeting_assist import meeting_assist
from bench.heldout_moderation import moderation
from bench.heldout_news_desk import news_desk
from bench.heldout_npc import npc_world
from bench.heldout_permits_office import permits_office
from bench.heldout_research import deep_research
from bench.heldout_rag import rerank_rag
from bench.heldout_recruiting import recruiting
from bench.heldout_rl_rollout import rl_rollout, rl_rollout_kept
from bench.heldout_rollout import prompt_rollout
from bench.heldout_sales_crm import sales_crm
from bench.heldout_property_mgmt import property_mgmt
from bench.heldout_airline_ops import airline_ops
from bench.heldout_tax_prep import tax_prep
from bench.heldout_city_311 import city_311
from bench.heldout_email_triage import email_triage
from bench.heldout_lab_notebook import lab_notebook
from bench.heldout_soc_copilot import soc_copilot
from bench.heldout_ad_creative import ad_creative
from bench.heldout_sports_live import sports_live
from bench.heldout_travel_agent import travel_agent
from bench.heldout_support import support_desk
from bench.heldout_swe_agent import swe_agent
from bench.heldout_telecom_noc import telecom_noc
from bench.heldout_pv_intake import pv_intake
from bench.heldout_lit_screen import lit_screen
from bench.heldout_home_assist import home_assist
from bench.heldout_patent_search import patent_search
from bench.heldout_tutoring import tutoring
from bench.heldout_vision import vision_mix

SHAPES = {"drift": drift, "loop": loop, "tenants": tenants, "agent": agent,
          "mooncake": mooncake, "rag_bursty": rag_bursty,
          "code_edit": code_edit, "batch_eval": batch_eval, "tool_agent": tool_agent,
          "doc_window": doc_window, "doc_fanout": doc_fanout, "rerank_rag": rerank_rag,
          "prompt_rollout": prompt_rollout, "fewshot_lora": fewshot_lora,
          "ide_tree": ide_tree, "support_desk": support_desk,
          "compaction_chat": compaction_chat, "rl_rollout": rl_rollout,
          "rl_rollout_kept": rl_rollout_kept, "vision_mix": vision_mix,
          "npc_world": npc_world, "api_gateway": api_gateway,
          "deep_research": deep_research, "tutoring": tutoring,
          "marketplace": marketplace, "bi_copilot": bi_copilot,
          "meeting_assist": meeting_assist, "legal_review": legal_review,
          "localization": localization, "call_center": call_center,
          "soc_copilot": soc_copilot, "catalog_backfill": catalog_backfill,
          "ediscovery_review": ediscovery_review,
          "media_pipeline": media_pipeline, "clinical_scribe": clinical_scribe,
          "fin_research": fin_research, "travel_agent": travel_agent,
          "insurance_claims": insurance_claims, "recruiting": recruiting,
          "logistics_dispatch": logistics_dispatch, "permits_office": permits_office,
          "course_grading": course_grading, "telecom_noc": telecom_noc, "bank_kyc": bank_kyc,
          "pv_intake": pv_intake, "ci_triage": ci_triage, "lit_screen": lit_screen,
          "home_assist": home_assist, "news_desk": news_desk, "patent_search": patent_search,
          "manufacturing_qc": manufacturing_qc, "sales_crm": sales_crm,
          "property_mgmt": property_mgmt, "airline_ops": airline_ops, "tax_prep": tax_prep,
          "city_311": city_311, "email_triage": email_triage, "lab_notebook": lab_notebook,
          "swe_agent": swe_agent, "companion_chat": companion_chat,
          "moderation": moderation, "sports_live": sports_live,
          "ad_creative": ad_creative}
