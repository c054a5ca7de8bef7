from django.urls import path

from playground import changes, inbox, playground, replays, runs, views

app_name = "playground"

urlpatterns = [
    path("", views.home, name="home"),
    path("playground/", playground.playground, name="playground"),
    path("playground/readout/", playground.readout, name="playground-readout"),
    path("playground/runs/<int:run_id>/", playground.inspector, name="inspector"),
    path("playground/runs/<int:run_id>/live/", playground.inspector_live, name="inspector-live"),
    path("runs/", runs.run_list, name="runs"),
    path("runs/live/", runs.run_list_live, name="runs-live"),
    path("runs/start/", runs.run_start, name="run-start"),
    path("runs/start/task/", runs.run_start_task, name="run-start-task"),
    path("runs/<int:run_id>/", runs.run_detail, name="run"),
    path("runs/<int:run_id>/live/", runs.run_live, name="run-live"),
    path("runs/<int:run_id>/fork/", runs.run_fork_page, name="run-fork"),
    path("replays/", replays.replays, name="replays"),
    path("replays/<int:replay_id>/", replays.replay, name="replay"),
    path("inbox/", inbox.inbox, name="inbox"),
    path("inbox/count/", views.inbox_count, name="inbox-count"),
    path("inbox/cards/", inbox.cards, name="inbox-cards"),
    path("inbox/<uuid:correlation_id>/", inbox.card, name="inbox-card"),
    path("inbox/<uuid:correlation_id>/live/", inbox.card_live, name="inbox-card-live"),
    path("inbox/<uuid:correlation_id>/resume/", inbox.resume, name="inbox-resume"),
    path(
        "inbox/changes/<int:request_id>/decide/",
        changes.decide,
        name="change-request-decide",
    ),
]
