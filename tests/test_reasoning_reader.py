"""The rule verifiers read reasoning as real models write it: Yes/No questions by their own subject, synonyms and
abbreviations, rejections, changes of mind, eliminations, markdown, and a labelled set written in real models'
styles (eval/reasoning_set)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medgrpo.data.record import LETTERS, MedADRecord
from medgrpo.rewards import verify

SET_DIR = Path(__file__).resolve().parents[1] / "eval" / "reasoning_set"


def rec(question, options, answer="A", task="anomaly_detection"):
    return MedADRecord(id="r", images=[], question=question, options=options, answer=answer, task=task)


def consistency(think, answer, record):
    return verify(f"<think>{think}</think>\n<answer>{answer}</answer>", record)["consistency"]


PTX = rec("Is there a pneumothorax?", ["Yes", "No"])
CT = rec("Is this a CT scan?", ["Yes", "No"], "B", "modality_classification")
SHIFT = rec("Is there mediastinal shift?", ["No", "Yes"])
CLEAR = rec("Are the lungs clear?", ["Yes", "No"])


@pytest.mark.parametrize(
    "record, think, consistent_with",
    [
        # a finding with pertinent negatives answers Yes; the negatives are about other things
        (PTX, "Frontal CXR. Thin visceral pleural line at the right apex. No mediastinal shift. No pleural "
              "effusion. Impression: small right apical PTX.", "A"),
        (PTX, "The lungs are fully expanded with lung markings to the periphery. No pneumothorax. No effusion.", "B"),
        (PTX, "There is a large left pleural effusion; no pneumothorax is seen.", "B"),
        (CT, "This is an axial T2-weighted MRI of the brain.", "B"),
        (CT, "Axial slice with bone bright and air dark: a CT scan.", "A"),
        # a subject the lexicon does not know is read from the question's own words; options in No/Yes order
        (SHIFT, "The trachea is midline. There is no mediastinal shift.", "A"),
        (SHIFT, "The mediastinum is displaced to the left: mediastinal shift is present.", "B"),
        (CLEAR, "The lungs are clear bilaterally.", "A"),
        (CLEAR, "Right lower lobe consolidation with an air bronchogram.", "B"),
        # a question that asks for an absence: a finding answers No
        (rec("Is the liver free of focal lesions?", ["Yes", "No"]), "There is a hypodense lesion in the liver.", "B"),
        (rec("Is the liver free of focal lesions?", ["Yes", "No"]), "No focal lesion is seen in the liver.", "A"),
        # a property: its own words ("not correctly positioned"), or how the finding looks
        (rec("Is the endotracheal tube correctly positioned?", ["Yes", "No"]),
         "The tip projects below the carina, so the tube is not correctly positioned.", "B"),
        (rec("Is the lesion well circumscribed?", ["Yes", "No"]), "An irregular, spiculated mass.", "B"),
        (rec("Is the lesion well circumscribed?", ["Yes", "No"]), "A round, well-defined nodule.", "A"),
        # the reasoning's own "Yes," / "No." answers it
        (PTX, "Yes, a pneumothorax.", "A"),
        (PTX, "Looking at the apex. No.", "B"),
    ],
)
def test_yes_no_reads_the_questions_own_subject(record, think, consistent_with):
    other = "B" if consistent_with == "A" else "A"
    assert consistency(think, consistent_with, record) == 1.0
    assert consistency(think, other, record) == 0.0


def test_open_ended_yes_no_reads_the_subject_too():
    record = MedADRecord(id="o", images=[], question="Is there a fracture?", options=[], answer="yes", task="other")
    think = "Transverse fracture of the distal radius with dorsal angulation; no dislocation."
    assert consistency(think, "yes", record) == 1.0
    assert consistency(think, "no", record) == 0.0


ANATOMY = rec("Which structure is marked?", ["Macula", "Optic disc", "Retinal vein", "Fovea"], "B", "anatomy_identification")
BOWEL = rec("Which abnormality is present?", ["Free intraperitoneal air", "Small bowel obstruction", "Ascites",
                                              "No abnormality"], "B")
BRAIN = rec("What is the finding?", ["Ischemic stroke", "Intracranial hemorrhage", "Glioma", "Abscess"], "B",
            "pathology_characterization")
VESSEL = rec("Which vessel is marked?", ["Ascending aorta", "Main pulmonary artery", "Superior vena cava",
                                         "Left atrium"], "B", "anatomy_identification")
SEQUENCE = rec("Which MRI sequence is shown?", ["T1-weighted", "T2-weighted", "FLAIR", "Diffusion-weighted imaging"],
               "C", "modality_classification")
ENDOSCOPY = rec("Which imaging mode was used?", ["White-light endoscopy", "Narrow-band imaging",
                                                 "Capsule endoscopy"], "B", "modality_classification")


@pytest.mark.parametrize(
    "record, think, answer",
    [
        # an option's own word, found in no other option
        (ANATOMY, "Vessels converge on a round pale structure, so it is the optic nerve head.", "B"),
        # initials of the option, and capitalised abbreviations spelled out
        (BOWEL, "Dilated small bowel loops with a transition point: mechanical SBO.", "B"),
        (BRAIN, "Hyperdense collection in the left basal ganglia, c/w acute ICH.", "B"),
        # British spelling
        (BRAIN, "A hyperdense intraparenchymal haemorrhage with surrounding oedema.", "B"),
        # markdown layout
        (BRAIN, "### Findings\n- **hyperdense** bleed\n\n**Answer: B**", "B"),
        # the lexicon tables: clinical names beyond the options' words
        (VESSEL, "It arises from the right ventricular outflow tract and bifurcates: the pulmonary trunk.", "B"),
        (ENDOSCOPY, "Brown superficial capillaries on teal mucosa. Impression: NBI.", "B"),
        (SEQUENCE, "Dark CSF, bright periventricular lesions: fluid-attenuated inversion recovery.", "C"),
        # "i.e." ends no sentence and restates more exactly; what a finding tells the image apart from is rejected
        (SEQUENCE, "Impression: T2-weighted with fluid attenuation, i.e. a FLAIR image. The dark CSF "
                   "distinguishes it from a T2-weighted image.", "C"),
    ],
)
def test_synonyms_abbreviations_and_layout_name_the_option(record, think, answer):
    assert consistency(think, answer, record) == 1.0
    assert consistency(think, "A" if answer != "A" else "C", record) == 0.0



def test_the_lexicon_tables_are_well_formed():
    """Each abbreviation spells out to one expansion; a synonym variant belongs to one name, is not the name and is
    not a phrase the concept tables read as it is (rewriting it could only change what it means)."""
    from medgrpo.rewards import lexicon

    for name in ("abbreviations.tsv", "synonyms.tsv"):
        rows = lexicon._table(name)
        assert rows and all(a.strip() == a and b.strip() == b and a and b for a, b in rows), name
    abbreviations = [a for a, _ in lexicon._table("abbreviations.tsv")]
    assert len(abbreviations) == len(set(abbreviations)) >= 300
    assert all(a != a.lower() for a in abbreviations)  # read in capitals only
    variants = [v for _, v in lexicon._table("synonyms.tsv")]
    assert len(variants) == len(set(variants)) >= 400
    assert not {v for v in variants if lexicon.norm_phrase(v) in lexicon.PHRASES}
    assert not set(variants) & set(lexicon.SYNONYMS)
    # one reading is final: a name holding another row's variant ("anteroposterior view") is read in that row's
    # form, a name holding a variant of its own is kept whole, and American compounds stay American
    for phrase in [*lexicon.SYNONYMS, *variants, "gastroesophageal reflux", "tracheoesophageal fistula"]:
        once = lexicon.normalize_text(phrase)
        assert lexicon.normalize_text(once) == once, phrase
    assert lexicon.normalize_text("gastroesophageal junction") == "gastroesophageal junction"
    assert lexicon.normalize_text("Legg-Calve-Perthes disease").lower() == "legg-calve-perthes disease"
    assert lexicon.normalize_text("lymphoedema") == "lymphedema"


def test_a_lesions_nature_neighbours_it_rejects_and_what_another_entity_would_do():
    benign = rec("Is this skin lesion benign?", ["Yes", "No"], "B")
    malignant = rec("Is this lesion malignant?", ["Yes", "No"])
    think = "Asymmetric, three colours, blue-white veil, irregular streaks: melanoma."
    assert consistency(think, "No", benign) == 1.0 and consistency(think, "Yes", benign) == 0.0
    assert consistency(think, "Yes", malignant) == 1.0 and consistency(think, "No", malignant) == 0.0
    assert consistency("Regular network, symmetric: a benign naevus.", "No", malignant) == 1.0
    assert consistency("Regular network, symmetric: a benign naevus.", "Yes", malignant) == 0.0
    # a predicate's opposite answers "No"; "LVEF" does not make the question one about the left side
    tube = rec("Is the endotracheal tube correctly positioned?", ["Yes", "No"], "B")
    assert consistency("No PTX. Impression: malpositioned ETT in the right main bronchus.", "No", tube) == 1.0
    fovea = rec("Is the foveal contour preserved in this OCT scan?", ["Yes", "No"], "B")
    assert consistency("Foveal depression lost; central thickening with cysts.", "No", fovea) == 1.0
    ef = rec("Is the left ventricular ejection fraction reduced?", ["Yes", "No"])
    think = "The right walls look fine. So systolic function is impaired: LVEF is reduced."
    assert consistency(think, "Yes", ef) == 1.0 and consistency(think, "No", ef) == 0.0
    assert consistency("The arrow is on the aortic arch. Yes.", "Yes", rec("Is it the aortic knob?", ["Yes", "No"])) == 1.0
    neck = rec("Which structure is marked?", ["Thyroid gland", "Common carotid artery", "Internal jugular vein",
                                              "Trachea"], "B", "anatomy_identification")
    think = ("The lateral vessel is the internal jugular vein, and the trachea is midline, so neither of those is "
             "the target. The marked vessel is the common carotid artery. The answer is B.")
    assert consistency(think, "B", neck) == 1.0
    lobe = rec("Which lobe?", ["Right upper lobe", "Right middle lobe", "Right lower lobe"], "B", "lesion_localization")
    think = ("Loss of the right heart border means the opacity is in the right middle lobe. A right lower lobe "
             "process would obscure the hemidiaphragm instead. The answer is B.")
    assert consistency(think, "B", lobe) == 1.0


def test_saying_the_options_cannot_be_separated_concludes_nothing():
    vessel = rec("Which artery?", ["Left anterior descending", "Left circumflex", "Right coronary artery"], "C",
                 "anatomy_identification")
    think = "The C-shape suggests the RCA. So it is either the RCA or the circumflex; without the angle I can't separate them."
    assert consistency(think, "C", vessel) == 0.5


def test_a_concept_of_the_options_own_confirms_but_does_not_contradict():
    """"medial compartment" names "Medial tibiofemoral" (tibiofemoral is in no table): weak evidence, enough to
    confirm the answer, not to punish another one (it may be a description)."""
    knee = rec("Which compartment is narrowed?", ["Medial tibiofemoral", "Lateral tibiofemoral", "Patellofemoral"],
               task="lesion_localization")
    think = "Near bone-on-bone contact. Conclusion: osteoarthritis predominantly of the medial compartment."
    assert consistency(think, "A", knee) == 1.0
    assert consistency(think, "C", knee) == 0.5


def test_an_open_answer_is_read_as_the_reasoning_is():
    """The free-text answer goes through the reasoning's own reading: "AP" and "anteroposterior" alike."""
    projection = MedADRecord(id="r", images=[], question="Is this radiograph PA or AP?", options=[], answer="AP",
                             task="modality_classification")
    assert consistency("Scapulae over the lungs. Conclusion: anteroposterior projection.", "AP", projection) == 1.0
    assert consistency("Conclusion: anteroposterior projection.", "AP view", projection) == 1.0
    wrist = MedADRecord(id="r", images=[], question="What abnormality is seen?", options=[], answer="distal radius "
                        "fracture", task="anomaly_detection")
    # its words in another order; denied, they contradict
    assert consistency("So the answer is a fracture of the distal radius.", "distal radius fracture", wrist) == 1.0
    assert consistency("There is no fracture of the distal radius.", "distal radius fracture", wrist) == 0.0
    # an answer its concepts do not say whole ({left, chest} for "left pulmonary artery") must be written
    vessel = MedADRecord(id="r", images=[], question="Which structure is marked?", options=[], answer="aortic knob",
                         task="anatomy_identification")
    assert consistency("A rounded contour at the upper left chest.", "left pulmonary artery", vessel) == 0.5
    # named, then the reasoning says it cannot decide: no conclusion
    think = "That could be the thyroid gland. Or the jugular vein. I really can't decide which."
    assert consistency(think, "thyroid gland", vessel) == 0.5


@pytest.mark.parametrize(
    "think",
    [
        # rejected, conceded and weighed mentions are not the conclusion
        "The hyperdensity argues against an ischemic stroke; this is an intracranial hemorrhage.",
        "Although a glioma could be considered, the findings favor an intracranial hemorrhage.",
        "This is an intracranial hemorrhage. An abscess is less likely.",
        "Intracranial hemorrhage; an underlying glioma cannot be excluded.",
        "A glioma would show mass effect and enhancement. Here there is an acute intracranial hemorrhage.",
        # the last committed conclusion wins after a change of mind
        "Initially this suggests an ischemic stroke. However, on closer inspection, it is an intracranial "
        "hemorrhage.",
        # an option-by-option elimination concludes what is left
        "Ischemic stroke: no. Glioma: no mass. Abscess: no rim enhancement. So the answer is B.",
        "Not a glioma or an abscess, and no ischemic stroke. The remaining choice: intracranial hemorrhage.",
    ],
)
def test_rejections_revisions_and_eliminations(think):
    assert consistency(think, "B", BRAIN) == 1.0
    assert consistency(think, "A", BRAIN) == 0.0


def test_a_final_letter_that_is_not_the_argued_conclusion_contradicts_it():
    think = "My first instinct was a glioma. So, actually, this is an intracranial hemorrhage. **Answer: C**"
    assert consistency(think, "C", BRAIN) == 0.0
    assert consistency(think.replace("Answer: C", "Answer: B"), "B", BRAIN) == 1.0
    hedge = "So it is either an intracranial hemorrhage or a glioma. Answer: B"
    assert consistency(hedge, "B", BRAIN) == 0.5  # a hedge stays a hedge


def test_a_pronoun_rejection_and_weak_evidence():
    """"..., so not that either" rejects what its sentence named; a conclusion that names an option only by a word
    of its own does not punish an answer it disagrees with (it may be a description)."""
    bones = rec("Which bone is marked?", ["Lunate", "Scaphoid", "Trapezium", "Capitate"], "B", "anatomy_identification")
    think = "So it is the scaphoid, not the lunate. The trapezium is in the distal row, so not that either."
    assert consistency(think, "B", bones) == 1.0
    optic = rec("Which structure is marked?", ["Macula", "Optic disc", "Retinal vein"], "B", "anatomy_identification")
    assert consistency("So the marked area is where the optic fibres gather.", "B", optic) == 1.0
    assert consistency("So the marked area is where the optic fibres gather.", "A", optic) == 0.5


def test_reasoning_that_cannot_decide_concludes_nothing():
    think = "It could be an intracranial hemorrhage, or it could be a glioma. I cannot decide between them."
    assert consistency(think, "B", BRAIN) == 0.5


def test_bare_letters_in_forms_no_article_takes():
    assert consistency("Glioma is excluded, so not C. B is the correct answer.", "B", BRAIN) == 1.0
    assert consistency("A cyst is a fluid collection. Therefore, the answer is B.", "B", BRAIN) == 1.0


# ---- payoff order: a committed conclusion always beats a hedge -----------------------------------------------

CLASSES = ["CT", "MRI", "X-ray", "Ultrasound", "Dermoscopy", "Fundus photography", "Endoscopy", "Histopathology"]
COMMITTED = [
    "Therefore the answer is {letter}.",
    "This is {text}.",
    "**Answer: {letter}**",
    "Impression: {text}.",
    "Findings are most consistent with {text}.",
    "{other} is less likely; this is {text}.",
    "Initially {other} came to mind. However, on reflection, it is {text}.",
]
HEDGES = [
    "It could be {text} or {other}.",
    "Either {text} or {other}; the answer is {letter} or {other_letter}.",
    "Differential: {text} versus {other}, so {letter} or {other_letter}.",
]


@settings(max_examples=150, deadline=None)
@given(
    options=st.lists(st.sampled_from(CLASSES), min_size=2, max_size=6, unique=True),
    data=st.data(),
)
def test_a_committed_conclusion_scores_above_a_hedge(options, data):
    gold = data.draw(st.integers(0, len(options) - 1))
    other = data.draw(st.integers(0, len(options) - 1).filter(lambda i: i != gold))
    record = rec("Which imaging modality is this?", options, LETTERS[gold], "modality_classification")
    fill = {"letter": LETTERS[gold], "text": options[gold], "other": options[other], "other_letter": LETTERS[other]}
    committed = data.draw(st.sampled_from(COMMITTED)).format(**fill)
    hedge = data.draw(st.sampled_from(HEDGES)).format(**fill)
    assert consistency(committed, LETTERS[gold], record) > consistency(hedge, LETTERS[gold], record)


# ---- the labelled set ------------------------------------------------------------------------------------------


def test_the_dev_half_of_the_labelled_set_reads_as_its_reader_labelled_it():
    """A guard on the tuned half (the README quotes the untouched test half): consistency agrees with the
    labels on at least 91% of the items, pays at most 10 inconsistent completions in full, and scores at most 6
    consistent ones below 0.5 (measured: 92.0%, 8, 4 of 560)."""
    rows = [json.loads(line) for line in (SET_DIR / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
    agree = below = paid_wrong = 0
    for row in rows:
        record = MedADRecord(id=row["id"], images=[], question=row["question"], options=row["options"],
                             answer=row["answer"], task=row["task"])
        score = verify(row["completion"], record)["consistency"]
        agree += (score == 1.0) == row["consistent"]
        below += row["consistent"] and score < 0.5
        paid_wrong += score == 1.0 and not row["consistent"]
    assert len(rows) >= 560
    assert agree >= 0.91 * len(rows) and below <= 6 and paid_wrong <= 10
