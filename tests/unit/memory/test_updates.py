"""The write-time update decision, on pairs: what replaces an earlier memory and what must not."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from shared.memory.updates import Earlier, UpdateRules, change_cue, decide, speaker_and_text

T0 = datetime(2026, 3, 1, tzinfo=UTC)
RULES = UpdateRules()


def earlier(content: str, similarity: float, *, days: int = -30, current: bool = True, **metadata) -> Earlier:
    return Earlier(uuid.uuid4(), content, metadata, T0 + timedelta(days=days), similarity, current)


@pytest.mark.parametrize(
    "text",
    [
        "We finally moved to Berlin last month.",
        "Sold the Civic last weekend; I'm driving a Tesla now.",
        "My doctor switched me from cetirizine to fexofenadine.",
        "The landlord raised the rent to 1,450 euros.",
        "I cut down to one coffee a day.",
        "I don't eat meat anymore.",
        "I'm down to 76 kilos after the diet.",
        "Turns out I'm not allergic to penicillin after all.",
        "Alice: I no longer work at the bakery.",
        "These days I only order oat milk cortados.",
        "We changed plans: August will be Norway instead of Portugal.",
    ],
)
def test_a_text_that_says_a_fact_changed_has_a_cue(text):
    assert change_cue(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "I visited Berlin last summer.",
        "I won't quit my job.",
        "I might switch to Linux one day.",
        "Where do I live now?",  # a question about a fact is not a new value of it
        "I finally finished the crime novel I started in spring.",
        "We bought strawberries at the farmers market.",
        # from LoCoMo, where nothing is replaced: a question with a photo after it, a sentence to the listener,
        # advice, "now" that means this minute
        "Melanie: Have you made any more art lately? [shares a photo: a stained glass window]",
        "Melanie: You found your true self and now you're helping others.",
        "Nate: You can use coconut oil instead of butter.",
        "Jon: The dance studio is on tenuous grounds right now, but I'm staying positive.",
        "Nate: Always happy to share them with you. Sending you the recipe now!",
        "Joanna: One of the actors came up to me and told me she liked my script!",  # an approach, not an amount
        "John: I've been going there from time to time.",
    ],
)
def test_news_a_question_or_a_change_that_did_not_happen_has_no_cue(text):
    assert change_cue(text) is None


def test_the_clearly_nearest_earlier_statement_is_replaced():
    old = earlier("I live in a small flat in Paris.", 0.42)
    others = [earlier("It rained the whole afternoon.", 0.21), earlier("We went to the market.", 0.18)]
    decision = decide("We finally moved to Berlin last month.", {}, T0, [*others, old], RULES)
    assert decision is not None and decision.replaces == old.id and decision.cue == "moved to"
    assert decision.margin == pytest.approx(0.21)


def test_no_update_without_a_clear_lead_or_below_the_similarity_floor():
    close = [earlier("I live in Paris.", 0.40), earlier("Paris was lovely in the spring.", 0.35)]
    assert decide("We moved to Berlin.", {}, T0, close, RULES) is None
    far = [earlier("I live in Paris.", 0.25)]
    assert decide("We moved to Berlin.", {}, T0, far, RULES) is None


def test_a_cue_in_one_sentence_is_read_in_that_sentence():
    assert change_cue("Have you been to Lisbon? We moved to Berlin last month.") == "moved to"
    assert change_cue("Thanks, you're kind. I don't eat meat anymore.") == "anymore"


def test_a_question_holds_no_fact_to_replace():
    asked = earlier("Caroline: Hey Mel! Good to see you! How have you been?", 0.5)
    stated = earlier("Caroline: I live in Paris. Have you been?", 0.62, days=-40)
    decision = decide("Caroline: We moved to Berlin last month.", {}, T0, [asked, stated], RULES)
    assert decision is not None and decision.replaces == stated.id
    assert decide("Caroline: We moved to Berlin last month.", {}, T0, [asked], RULES) is None
    # ... though it is a near neighbour: nearer than the statement, it leaves no clear lead
    assert (
        decide("Caroline: We moved to Berlin last month.", {}, T0, [earlier(asked.content, 0.7), stated], RULES) is None
    )


def test_a_visit_is_not_a_move():
    assert decide("I visited Berlin last week.", {}, T0, [earlier("I live in Paris.", 0.5)], RULES) is None


def test_another_speakers_fact_is_not_replaced():
    theirs = earlier("Bob: I live in Paris.", 0.6)
    assert decide("Alice: I moved to Berlin.", {}, T0, [theirs], RULES) is None
    by_metadata = earlier("I live in Paris.", 0.6, speaker="Bob")
    assert decide("I moved to Berlin.", {"speaker": "Alice"}, T0, [by_metadata], RULES) is None
    own = earlier("Alice: I live in Paris.", 0.75)
    assert decide("Alice: I moved to Berlin.", {}, T0, [theirs, own], RULES).replaces == own.id


def test_the_lead_is_over_every_near_memory_whoever_said_it():
    # In a conversation the other speaker's reply is as near as the statement: no clear lead, no update.
    own = earlier("Alice: I started a weekend yoga class, it's awesome!", 0.62)
    reply = earlier("Bob: A yoga class, that's awesome! Keep it up.", 0.58)
    assert decide("Alice: I'm gonna keep it up, yoga is part of my routine now.", {}, T0, [own, reply], RULES) is None


def test_a_backdated_add_never_replaces_a_memory_about_a_later_time():
    later = earlier("I live in Paris.", 0.6, days=10)
    assert decide("We moved to Berlin.", {}, T0, [later], RULES) is None


def test_an_already_replaced_memory_is_passed_over_for_the_current_one():
    first = earlier("I drive a Honda Civic.", 0.7, current=False)
    second = earlier("I sold the Civic and drive a Tesla now.", 0.55)
    filler = earlier("The neighbours are renovating.", 0.1)
    decision = decide("I switched from the Tesla to a bike.", {}, T0, [first, second, filler], RULES)
    assert decision is not None and decision.replaces == second.id


def test_off_is_off():
    rules = UpdateRules(on=False)
    assert decide("We moved to Berlin.", {}, T0, [earlier("I live in Paris.", 0.6)], rules) is None


def test_the_speaker_comes_from_metadata_or_a_name_prefix():
    assert speaker_and_text("Caroline: I went to a support group.", {}) == ("caroline", "I went to a support group.")
    assert speaker_and_text("note to self: buy milk", {})[0] is None  # not a name
    assert speaker_and_text("I moved.", {"speaker": "Mel"})[0] == "mel"


@pytest.mark.parametrize(
    "text",
    [
        "I went to a castle during my trip to the UK.",  # a visit
        "Been a busy week since we talked.",  # a greeting
        "I've been into dancing since I was a kid.",  # a duration
        # the native client's false supersessions (bench.supersessions --client native)
        "My online clothes store is open! I've been dreaming of this for a while now.",  # up to now
        "My wife and I just left for our European vacation!",  # a departure
        "I messed up during a big game. Instead of getting stuck in it, I kept training.",  # a choice
        "The game turned out to be a total success!",  # an outcome
    ],
)
def test_what_fired_on_locomo_is_not_a_cue(text):
    assert change_cue(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "I left the band last year.",
        "Instead of the bus I take the bike.",
        "It turned out the test was wrong.",
        "I've lived here for years, but now I'm moving to Oslo.",
    ],
)
def test_the_cues_those_exceptions_keep(text):
    assert change_cue(text) is not None


def test_a_restatement_with_now_replaces_nothing():
    """A cue that only says what holds now, with a statement as near as a restatement is (on LoCoMo, a turn of a
    later session saying again what an earlier one said: 0.77-0.88), is no update; a change cue still is one."""
    old = earlier("Nate: I won my first video game tournament last week - so exciting!", 0.88)
    far = [earlier("Nate: The turtles like the new tank.", 0.3)]
    again = "Nate: I won an international tournament yesterday! Gaming is how I make a living now."
    assert decide(again, {}, T0, [old, *far], RULES) is None
    changed = "Nate: I sold my console and now I stream on a laptop instead."
    assert decide(changed, {}, T0, [old, *far], RULES) is not None  # "sold": a change, however near
    now_far = earlier("Nate: I play on a PlayStation.", 0.6)
    assert decide("Nate: I'm on a Switch now.", {}, T0, [now_far, *far], RULES) is not None


def test_a_passage_neither_replaces_nor_is_replaced():
    """Over 64 words a text holds many facts (an abstract, a note): one cue in it replaces nothing, and one statement
    does not hide it."""
    passage = "Background. " + "The cohort was followed for years and measured each spring. " * 8
    old = earlier("I live in a small flat in Paris.", 0.6)
    assert decide(passage + "Patients now receive the new drug instead.", {}, T0, [old], RULES) is None
    assert decide("We finally moved to Berlin last month.", {}, T0, [earlier(passage, 0.6)], RULES) is None
    assert decide("We finally moved to Berlin last month.", {}, T0, [old], RULES) is not None
