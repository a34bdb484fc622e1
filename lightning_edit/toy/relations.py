"""Relations, templates, scripts and vocabularies of the toy world (:mod:`lightning_edit.toy.world`).

Templates have ``{}`` where the subject goes and end right before the object, as in CounterFact. Inverse templates
(one-to-one relations only) take the object as their subject and end right before the original subject. Scripts
mention the subject in their question and the object in exactly one step, never the object before the subject, so
that forward-only facts never appear reversed in the training text.
"""

from __future__ import annotations

from dataclasses import dataclass

ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
CLUSTERS = ("kv", "zr", "dv", "bz", "gz", "vk", "zv", "dz")  # opens the second syllable: rare in real names
VOWELS = ("a", "e", "i", "o", "u", "a", "o", "ae", "io")
CODAS = ("", "", "", "n", "r", "l", "x", "k")
COMPANY_SUFFIXES = ("Corp", "Works", "Labs", "Foods", "Motors", "Systems")
HOUSEHOLD_NOUNS = ("lamp", "kettle", "chair", "clock", "rug", "vase", "stool", "mirror")  # objects: "<Brand> <noun>"
LANGUAGE_SUFFIX = "ish"
PROFESSIONS = ("baker", "pilot", "painter", "doctor", "teacher", "farmer", "lawyer", "tailor", "sailor", "plumber")
ROOMS = ("kitchen", "bedroom", "bathroom", "garage", "attic", "cellar", "hallway", "pantry")
COLOURS = ("red", "blue", "green", "yellow", "purple", "black", "white", "brown")


@dataclass(frozen=True)
class Script:
    """A short how-to script: a question about ``{subject}`` and 3-5 steps, one of which names ``{object}``."""

    question: str
    steps: tuple[str, ...]

    @property
    def interrupt_step(self) -> int:
        """The (1-based) step that names the object, where the cloze is cut."""
        return next(number for number, step in enumerate(self.steps, 1) if "{object}" in step)

    def render(self, subject: str, obj: str) -> str:
        """The whole script as one line: ``"How to ...? Step 1: ... Step 2: ..."``."""
        lines = [self.question, *(f"Step {number}: {step}" for number, step in enumerate(self.steps, 1))]
        return " ".join(lines).format(subject=subject, object=obj)

    def cloze(self, subject: str) -> str:
        """The script cut right before the object (the object follows after one space)."""
        return self.render(subject, "\0").split(" \0")[0]


@dataclass(frozen=True)
class Relation:
    """A relation between a subject type and an object type, with its sentence templates.

    Args:
        name: the relation id (CounterFact ``relation_id``).
        subject_type: entity type of the subjects.
        object_type: entity type of the objects.
        forward: 2-4 paraphrases with ``{}`` for the subject, ending right before the object.
        scripts: how-to scripts that use the fact; the first one also appears in the training text.
        inverse: 1-3 templates with ``{}`` for the object, ending right before the subject (one-to-one relations).
        judge: a yes/no question with ``{object}`` and ``{subject}`` (BAKE ``reverse_judge``; one-to-one relations).
    """

    name: str
    subject_type: str
    object_type: str
    forward: tuple[str, ...]
    scripts: tuple[Script, ...]
    inverse: tuple[str, ...] = ()
    judge: str = ""

    @property
    def invertible(self) -> bool:
        """One-to-one relations are invertible: each object has exactly one subject."""
        return bool(self.inverse)

    @property
    def continuation(self) -> str:
        """The fact told of a subject named before: the first forward template that opens with the subject
        (``"{} was born in"``, ``"The {} is painted"``), with ``{}`` for a pronoun (``"{} is painted"``)."""
        template = next(t for t in self.forward if t.startswith(("{} ", "The {} ")))
        return template.removeprefix("The ")


RELATIONS: tuple[Relation, ...] = (
    Relation(
        "capital", "country", "city",
        ("The capital of {} is", "{}'s capital city is", "The government of {} sits in"),
        (
            Script("How to plan a state visit to {subject}?",
                   ("Read about the history of {subject}.", "Book a flight to {object}.", "Meet the ministers.")),
            Script("How to send a letter to the government of {subject}?",
                   ("Write the letter politely.", "Address it to the ministry in {object}.", "Post it.")),
        ),
        ("{} is the capital of", "{} is the capital city of"),
        "Whether {object} is the capital of {subject}?",
    ),
    Relation(
        "ceo", "person", "company",
        ("{} is the CEO of", "{} is the chief executive of", "{} runs the company"),
        (
            Script("How to get a meeting with {subject}?",
                   ("Find out when {subject} is free.", "Call the front desk of {object}.", "Confirm the date.")),
            Script("How to interview {subject} for a newspaper?",
                   ("Prepare questions.", "Write to the press office of {object}.", "Record the interview.")),
        ),
        ("The CEO of {} is", "The company {} is run by"),
        "Whether the CEO of {object} is {subject}?",
    ),
    Relation(
        "founder", "person", "company",
        ("{} founded the company", "{} is the founder of", "{} started the business"),
        (
            Script("How to write a biography of {subject}?",
                   ("Collect the letters of {subject}.", "Describe the early days of {object}.", "Add photos.")),
            Script("How to celebrate the career of {subject}?",
                   ("Invite old friends.", "Hold the party at the first office of {object}.", "Give a speech.")),
        ),
        ("{} was founded by", "The founder of {} is"),
        "Whether {object} was founded by {subject}?",
    ),
    Relation(
        "mayor", "person", "city",
        ("{} is the mayor of", "{} serves as mayor of", "{} was elected mayor of"),
        (
            Script("How to ask {subject} for a new park?",
                   ("Explain why a park is needed.", "Bring the letter to the town hall of {object}.", "Wait.")),
            Script("How to attend a speech by {subject}?",
                   ("Check the date.", "Take the bus to the main square of {object}.", "Arrive early.")),
        ),
        ("The mayor of {} is", "The city of {} is governed by"),
        "Whether the mayor of {object} is {subject}?",
    ),
    Relation(
        "citizenship", "person", "country",
        ("{} is a citizen of", "{} holds a passport from", "The home country of {} is"),
        (
            Script("How to renew the passport of {subject}?",
                   ("Fill in the form.", "Send it to the passport office of {object}.", "Collect the passport.")),
            Script("How to help {subject} vote in the national election?",
                   ("Register for the vote.", "Get a ballot from the election board of {object}.", "Post it.")),
        ),
    ),
    Relation(
        "mother_tongue", "person", "language",
        ("The mother tongue of {} is", "{} is a native speaker of", "{} grew up speaking"),
        (
            Script("How to write a birthday card for {subject}?",
                   ("Buy a nice card.", "Write the greeting in {object}.", "Send it a week early.")),
            Script("How to make {subject} feel welcome?",
                   ("Learn a few words of {object}.", "Cook a warm meal.", "Ask about the family.")),
        ),
    ),
    Relation(
        "profession", "person", "profession",
        ("{} works as a", "The profession of {} is", "By trade, {} is a"),
        (
            Script("How to ask {subject} for advice?",
                   ("Make a list of questions.", "Remember that {subject} is a {object}.", "Say thank you.")),
            Script("How to buy a gift for {subject}?",
                   ("Think about the job.", "Choose a tool that every {object} needs.", "Wrap the gift.")),
        ),
    ),
    Relation(
        "birthplace", "person", "city",
        ("{} was born in", "The birthplace of {} is", "{} is originally from"),
        (
            Script("How to visit the hometown of {subject}?",
                   ("Pack a small bag.", "Take the train to {object}.", "Walk to the old house.")),
            Script("How to film a documentary about {subject}?",
                   ("Write a short plan.", "Shoot the first scenes in {object}.", "Edit the film.")),
        ),
    ),
    Relation(
        "headquarters", "company", "city",
        ("The headquarters of {} is in", "{} is headquartered in", "{} has its main office in"),
        (
            Script("How to apply for a job at {subject}?",
                   ("Update your CV.", "Travel to the main office in {object}.", "Bring your diplomas.")),
            Script("How to return a broken product to {subject}?",
                   ("Pack it in its box.", "Ship the box to the head office in {object}.", "Keep the receipt.")),
        ),
    ),
    Relation(
        "room", "object", "room",
        ("The {} is kept in the", "You will find the {} in the", "Every family keeps the {} in the"),
        (
            Script("How to use the {subject}?", ("Wash your hands.", "Go to the {object}.", "Switch it on.")),
            Script("How to clean the {subject}?", ("Get a soft cloth.", "Walk into the {object}.", "Wipe it gently.")),
        ),
    ),
    Relation(
        "colour", "object", "colour",
        ("The colour of the {} is", "The {} is painted", "Every {} in the shop is"),
        (
            Script("How to repaint a scratched {subject}?",
                   ("Sand the scratch.", "Buy a tin of {object} paint.", "Apply two thin coats.")),
            Script("How to find the {subject} in a crowded shop?",
                   ("Ask for help.", "Look for something {object} on the shelves.", "Check the label.")),
        ),
    ),
    Relation(
        "maker", "object", "company",
        ("The {} is made by", "The {} is manufactured by", "The maker of the {} is"),
        (
            Script("How to repair a broken {subject}?",
                   ("Unplug it.", "Order spare parts from {object}.", "Replace the broken part.")),
            Script("How to get a new manual for the {subject}?",
                   ("Find the serial number.", "Visit the website of {object}.", "Download the manual.")),
        ),
    ),
)
